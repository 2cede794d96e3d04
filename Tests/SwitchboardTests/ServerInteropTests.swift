import Foundation
import Synchronization
import Testing
@testable import Switchboard
import SwitchboardCore

/// Parent of every server interop, scale, resilience and flood suite: serialized, so that the
/// file-descriptor accounting of the scale test, the memory measurements of the flood tests, the
/// timing-sensitive cases (handshake timeout) and the CPU-heavy tests (thousands of connections,
/// floods) never run at the same time as one another.
@Suite(.serialized) enum ServerInterop {}

/// Starts a server on 127.0.0.1:0, runs `body`, and shuts the server down even if `body` throws.
func withTestServer(_ configure: (inout WebSocketServerConfiguration) -> Void = { _ in },
                    setup: (WebSocketServer) -> Void,
                    _ body: (WebSocketServer, Int) async throws -> Void) async throws {
    var configuration = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
    configure(&configuration)
    let server = WebSocketServer(configuration: configuration)
    setup(server)
    let port = try await server.start()
    do {
        try await body(server, port)
    } catch {
        await server.shutdown(timeout: .seconds(2))
        throw error
    }
    await server.shutdown(timeout: .seconds(2))
}

/// Echoes every message back.
@Sendable func echoHandler(_ c: WebSocketConnection) async {
    for await m in c.messages() { try? await c.send(m) }
}

/// The JSON error body `{"error":{"message","type","code"}}` as a dictionary, or nil.
func errorObject(_ body: String) -> [String: Any]? {
    guard let obj = try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any] else { return nil }
    return obj["error"] as? [String: Any]
}

extension ServerInterop {
@Suite struct ServerInteropTests {

    // MARK: Echo

    @Test func pythonClientEchoesTextAndBinary() async throws {
        try await withTestServer(setup: { $0.route("/echo", handler: echoHandler) }) { _, port in
            let r = try await ServerPeer.run("echo", port: port, ["/echo"])
            #expect(r.exitCode == 0, "\(r.transcript)")
            let text = try #require(r.first("text"), "\(r.transcript)")
            #expect(text["received"] as? String == text["sent"] as? String)
            #expect(text["received"] as? String == "héllo ✓ switchboard")
            #expect(text["is_str"] as? Bool == true)
            let binary = try #require(r.first("binary"), "\(r.transcript)")
            #expect(binary["is_bytes"] as? Bool == true)
            #expect((binary["received"] as? String)?.count == 2048)
            #expect(binary["received"] as? String == binary["sent"] as? String)
            #expect(r.first("closed")?["code"] as? Int == 1000, "\(r.transcript)")
        }
    }

    // MARK: Authentication

    static func secureRoute(_ server: WebSocketServer) {
        server.route("/secure", authenticate: { request in
            guard let token = request.bearerToken, ConstantTime.equals(token, "T") else { return .unauthorized() }
            return .accept(userInfo: ["user": "alice"])
        }, handler: { c in
            for await m in c.messages() {
                if m.text == "who" { try? await c.send(text: "user=\(c.userInfo["user"] ?? "none")") }
            }
        })
    }

    @Test func bearerTokenAuthentication() async throws {
        try await withTestServer(setup: Self.secureRoute) { server, port in
            for headers in [[], ["--header", "Authorization: Bearer wrong"], ["--header", "Authorization: Bearer TT"]] {
                let r = try await ServerPeer.run("connect", port: port, ["/secure"] + headers + ["--send", "who"])
                #expect(r.exitCode == 0, "\(r.transcript)")
                let rejected = try #require(r.first("rejected"), "expected a rejection with \(headers): \(r.transcript)")
                #expect(rejected["status"] as? Int == 401)
                let headerFields = rejected["headers"] as? [String: any Sendable]
                #expect((headerFields?["content-type"] as? String)?.hasPrefix("application/json") == true)
                let error = try #require(errorObject(rejected["body"] as? String ?? ""),
                                         "body is not {\"error\":{…}}: \(rejected)")
                #expect(error["message"] is String)
                #expect(error["type"] as? String == "authentication_error")
                #expect(error["code"] as? String == "unauthorized")
                #expect(r.first("open") == nil)
            }
            let ok = try await ServerPeer.run("connect", port: port,
                                              ["/secure", "--header", "Authorization: Bearer T", "--send", "who"])
            #expect(ok.exitCode == 0, "\(ok.transcript)")
            #expect(ok.first("open") != nil, "\(ok.transcript)")
            #expect(ok.first("message")?["data"] as? String == "user=alice", "\(ok.transcript)")
            #expect(ok.first("closed")?["code"] as? Int == 1000)
            // The token may also come as a query item (browsers cannot set headers).
            let query = try await ServerPeer.run("connect", port: port, ["/secure?token=T", "--send", "who"])
            #expect(query.first("message")?["data"] as? String == "user=alice", "\(query.transcript)")
            #expect(server.statistics.rejectedConnections == 3)
            #expect(server.statistics.acceptedConnections == 2)
        }
    }

    // MARK: Routing and plain HTTP

    @Test func unknownPathIs404() async throws {
        try await withTestServer(setup: { $0.route("/echo", handler: echoHandler) }) { _, port in
            let r = try await ServerPeer.run("connect", port: port, ["/nowhere"])
            let rejected = try #require(r.first("rejected"), "\(r.transcript)")
            #expect(rejected["status"] as? Int == 404)
            let error = errorObject(rejected["body"] as? String ?? "")
            #expect(error?["type"] as? String == "not_found_error", "\(rejected)")
        }
    }

    @Test func wildcardRouteCatchesOtherPaths() async throws {
        try await withTestServer(setup: { server in
            server.route("/exact") { c in try? await c.send(text: "exact") }
            server.route("*") { c in try? await c.send(text: "wildcard:\(c.request?.path ?? "")") }
        }) { _, port in
            let a = try await ServerPeer.run("receive_first", port: port, ["/exact"])
            #expect(a.first("message")?["data"] as? String == "exact", "\(a.transcript)")
            let b = try await ServerPeer.run("receive_first", port: port, ["/anything/else"])
            #expect(b.first("message")?["data"] as? String == "wildcard:/anything/else", "\(b.transcript)")
        }
    }

    static func plainGET(port: Int, path: String) async throws -> ServerRawSocket.HTTPReply {
        try await onServerTestThread {
            let s = try ServerRawSocket(port: port)
            try s.send("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n")
            let reply = try s.readHTTPResponse()
            guard s.readsEOF() else { throw ServerRawSocket.Failure("connection not closed after the response") }
            return reply
        }
    }

    @Test func plainHTTPRequestsGoToTheHTTPHandler() async throws {
        try await withTestServer(setup: { server in
            server.route("/echo", handler: echoHandler)
            server.onHTTPRequest { head in
                head.path == "/health" ? HTTPResponse(status: 200, headers: ["Content-Type": "text/plain"],
                                                      body: Array("healthy".utf8)) : nil
            }
        }) { _, port in
            let ok = try await Self.plainGET(port: port, path: "/health?verbose=1")
            #expect(ok.status == 200)
            #expect(ok.bodyText == "healthy")
            #expect(ok.header("Content-Type") == "text/plain")
            let missing = try await Self.plainGET(port: port, path: "/other")
            #expect(missing.status == 404)
            // A plain GET on a WebSocket route is not an upgrade either.
            let onRoute = try await Self.plainGET(port: port, path: "/echo")
            #expect(onRoute.status == 404)
        }
    }

    @Test func plainHTTPWithoutHandlerIs404() async throws {
        try await withTestServer(setup: { $0.route("/echo", handler: echoHandler) }) { _, port in
            let reply = try await Self.plainGET(port: port, path: "/health")
            #expect(reply.status == 404)
            #expect(errorObject(reply.bodyText)?["code"] as? String == "not_found")
        }
    }

    // MARK: Handshake rejections and protocol errors (raw bytes)

    @Test func wrongWebSocketVersionIs426() async throws {
        try await withTestServer(setup: { $0.route("/echo", handler: echoHandler) }) { _, port in
            let reply = try await onServerTestThread {
                let s = try ServerRawSocket(port: port)
                try s.send(ServerRawSocket.upgradeRequest(path: "/echo", version: "8"))
                return try s.readHTTPResponse()
            }
            #expect(reply.status == 426)
            #expect(reply.header("Sec-WebSocket-Version") == "13", "\(reply.headers)")
        }
    }

    @Test func oversizedMessageIsClosedWith1009() async throws {
        try await withTestServer({ $0.connection.protocolLimits = .init(maxFrameSize: 1024, maxMessageSize: 1024) },
                                 setup: { $0.route("/echo", handler: echoHandler) }) { _, port in
            let fits = try await ServerPeer.run("oversize", port: port, ["/echo", "1024"])
            #expect(fits.first("message")?["size"] as? Int == 1024, "\(fits.transcript)")
            let r = try await ServerPeer.run("oversize", port: port, ["/echo", "1025"])
            #expect(r.exitCode == 0, "\(r.transcript)")
            #expect(r.first("closed")?["code"] as? Int == 1009, "\(r.transcript)")
        }
    }

    /// Sends `frame` after a valid handshake; returns the close frame the server answers with.
    static func closeFrameAfterSending(_ frame: [UInt8], port: Int) async throws -> ServerRawSocket.Frame {
        try await onServerTestThread {
            let s = try ServerRawSocket(port: port)
            try s.handshake(path: "/echo")
            try s.send(frame)
            let close = try s.readUntilCloseFrame()
            guard s.readsEOF() else { throw ServerRawSocket.Failure("server did not close TCP after its close frame") }
            return close
        }
    }

    @Test func invalidUTF8TextIsClosedWith1007() async throws {
        try await withTestServer(setup: { $0.route("/echo", handler: echoHandler) }) { _, port in
            let frame = ServerRawSocket.frame(opcode: 0x1, payload: [0x68, 0x69, 0xC3, 0x28])
            let close = try await Self.closeFrameAfterSending(frame, port: port)
            #expect(close.closeCode == 1007)
        }
    }

    @Test func unmaskedClientFrameIsClosedWith1002() async throws {
        try await withTestServer(setup: { $0.route("/echo", handler: echoHandler) }) { _, port in
            let frame = ServerRawSocket.frame(opcode: 0x1, payload: Array("hello".utf8), masked: false)
            let close = try await Self.closeFrameAfterSending(frame, port: port)
            #expect(close.closeCode == 1002)
        }
    }

    @Test func rawMaskedEchoAndCleanClose() async throws {
        try await withTestServer(setup: { $0.route("/echo", handler: echoHandler) }) { _, port in
            let (echo, close) = try await onServerTestThread {
                let s = try ServerRawSocket(port: port)
                try s.handshake(path: "/echo")
                // Fragmented text, with a ping in between.
                try s.send(ServerRawSocket.frame(opcode: 0x1, payload: Array("frag".utf8), fin: false))
                try s.send(ServerRawSocket.frame(opcode: 0x9, payload: [1, 2, 3]))
                try s.send(ServerRawSocket.frame(opcode: 0x0, payload: Array("mented".utf8)))
                let pong = try s.readFrame()
                guard pong.opcode == 0xA, pong.payload == [1, 2, 3] else { throw ServerRawSocket.Failure("no pong: \(pong)") }
                let echo = try s.readFrame()
                try s.send(ServerRawSocket.closeFrame(code: 1000))
                let close = try s.readFrame()
                return (String(decoding: echo.payload, as: UTF8.self), close.closeCode)
            }
            #expect(echo == "fragmented")
            #expect(close == 1000)
        }
    }

    // MARK: Origins and subprotocols

    @Test func originAllowList() async throws {
        try await withTestServer({ $0.originPolicy = .exactly(["https://ok.example"]) },
                                 setup: { $0.route("/echo", handler: echoHandler) }) { _, port in
            let evil = try await ServerPeer.run("connect", port: port, ["/echo", "--origin", "https://evil.example"])
            let rejected = try #require(evil.first("rejected"), "\(evil.transcript)")
            #expect(rejected["status"] as? Int == 403)
            #expect(errorObject(rejected["body"] as? String ?? "")?["type"] as? String == "permission_error")
            let ok = try await ServerPeer.run("connect", port: port,
                                              ["/echo", "--origin", "https://ok.example", "--send", "hi"])
            #expect(ok.first("open") != nil, "\(ok.transcript)")
            #expect(ok.first("message")?["data"] as? String == "hi")
        }
    }

    @Test func subprotocolNegotiation() async throws {
        try await withTestServer({ $0.subprotocols = ["chat.v2", "chat.v1"] }, setup: { server in
            server.route("/chat") { c in try? await c.send(text: "proto=\(c.subprotocol ?? "none")") }
        }) { _, port in
            let r = try await ServerPeer.run("receive_first", port: port, ["/chat", "chat.v1"])
            #expect(r.first("open")?["subprotocol"] as? String == "chat.v1", "\(r.transcript)")
            #expect(r.first("message")?["data"] as? String == "proto=chat.v1", "\(r.transcript)")
            // Both offered: the server's preference wins.
            let both = try await ServerPeer.run("receive_first", port: port, ["/chat", "chat.v1", "chat.v2"])
            #expect(both.first("open")?["subprotocol"] as? String == "chat.v2", "\(both.transcript)")
            #expect(both.first("message")?["data"] as? String == "proto=chat.v2", "\(both.transcript)")
        }
    }

    // MARK: Topics

    @Test func topicFanOutTo100PythonClients() async throws {
        try await withTestServer(setup: { server in
            server.route("/room") { [weak server] c in
                guard let server else { return }
                server.subscribe(c, to: "room")
                try? await c.send(text: "subscribed")
                for await m in c.messages() {
                    guard let t = m.text else { continue }
                    if t == "count" {
                        try? await c.send(text: String(server.subscriberCount(of: "room")))
                    } else if t.hasPrefix("publish:") {
                        await server.publish(text: String(t.dropFirst("publish:".count)), to: "room", excluding: c)
                    }
                }
            }
        }) { server, port in
            let r = try await ServerPeer.run("fanout", port: port, ["/room", "100"], timeout: .seconds(300))
            #expect(r.exitCode == 0, "\(r.transcript)")
            #expect(r.first("count_before")?["value"] as? String == "100", "\(r.transcript)")
            let fanout = try #require(r.first("fanout"), "\(r.transcript)")
            #expect(fanout["receivers"] as? Int == 99)
            #expect(fanout["received"] as? Int == 99, "\(fanout)")
            // The sender's next reply is the count, not its own publication.
            #expect(r.first("sender_next")?["value"] as? String == "100", "\(r.transcript)")
            #expect(r.first("closed")?["codes"] as? [any Sendable] as? [Int] == [1000], "\(r.transcript)")
            #expect(await serverEventually { server.subscriberCount(of: "room") == 0 },
                    "subscribers left: \(server.subscriberCount(of: "room"))")
        }
    }

    @Test func slowConsumerIsClosedWhileOthersReceiveEverything() async throws {
        let acked = Atomic<Int>(0)
        let total = 160          // 64 KiB each: 10 MiB, far more than one socket's buffers
        let window = 8           // at most 512 KiB in flight to the Python reader (high-water mark 1 MiB)
        // The slow reader's 1013 close frame waits behind its queue until the very end, when the
        // test reads it: the close timeout (default 10 s, after which the server drops TCP and the
        // queued close frame with it) must outlast the whole feed, however slow the build; so
        // must the write-stall deadline (the slow reader takes nothing).
        try await withTestServer({ $0.connection.closeTimeout = .seconds(3600); $0.connection.writeStallTimeout = nil },
                                 setup: { server in
            server.route("/feed") { [weak server] c in
                server?.subscribe(c, to: "feed")
                for await m in c.messages() {
                    if let t = m.text, t.hasPrefix("ack:"), let n = Int(t.dropFirst(4)) {
                        acked.store(n, ordering: .relaxed)
                    }
                }
            }
        }) { server, port in
            // The slow one: a raw socket with a tiny receive window that never reads.
            let slow = try await onServerTestThread { () -> UncheckedBox<ServerRawSocket> in
                let s = try ServerRawSocket(port: port, timeout: 60, receiveBuffer: 4096)
                try s.handshake(path: "/feed")
                return UncheckedBox(s)
            }
            defer { slow.value.close() }
            let peer = try ServerPeer("counted_subscriber", port: port, ["/feed", String(total), String(window)])
            #expect(await peer.waitFor(event: "open"))
            #expect(await serverEventually { server.subscriberCount(of: "feed") == 2 })

            var published = 0
            for i in 0..<total {
                let ok = await serverEventually { i - acked.load(ordering: .relaxed) < window }
                guard ok else { Issue.record("the Python subscriber stopped acknowledging at \(acked.load(ordering: .relaxed))"); break }
                var payload = [UInt8](repeating: UInt8(truncatingIfNeeded: i), count: 64 * 1024)
                for b in 0..<8 { payload[b] = UInt8(truncatingIfNeeded: UInt64(i) >> (56 - 8 * UInt64(b))) }
                await server.publish(.binary(payload), to: "feed")
                published += 1
            }
            let r = await peer.finish()
            #expect(r.exitCode == 0, "\(r.transcript)")
            let done = try #require(r.first("done"), "\(r.transcript)")
            #expect(done["received"] as? Int == total)
            #expect(done["in_order"] as? Bool == true)
            #expect(server.statistics.slowConsumersClosed >= 1)

            // The slow reader finds, behind what was queued for it, a 1013 close frame.
            let code = try await onServerTestThread { () -> Int? in
                let s = slow.value
                let close = try s.readUntilCloseFrame()
                try? s.send(ServerRawSocket.closeFrame(code: 1000))
                return close.closeCode
            }
            #expect(code == 1013)
            // Once its close handshake is over, it has left the topic (as has the Python reader).
            #expect(await serverEventually { server.subscriberCount(of: "feed") == 0 },
                    "subscribers left: \(server.subscriberCount(of: "feed"))")
        }
    }

    // MARK: Shutdown

    @Test func gracefulShutdownSendsQueuedMessagesThen1001() async throws {
        let connections = Locked<[WebSocketConnection]>([])
        let endings = Locked<[WebSocketCloseCode?]>([])
        var configuration = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        // Bounds for a failing run only: shutdown returns as soon as every handshake is over. A
        // short one would abort slow (ThreadSanitizer) handshakes, and those end without 1001.
        configuration.connection.closeTimeout = .seconds(60)
        let server = WebSocketServer(configuration: configuration)
        server.route("/shut") { c in
            connections.withLock { $0.append(c) }
            for await _ in c.messages() {}
            // Read here, isolated to the connection (the handler's parameter is `isolated`),
            // while its loop still runs.
            let code = c.closeStatus?.code
            endings.withLock { $0.append(code) }
        }
        let port = try await server.start()
        let peer = try ServerPeer("shutdown", port: port, ["/shut", "20"])
        #expect(await peer.waitFor(event: "connected"))
        #expect(await serverEventually { connections.withLock { $0.count } == 20 })

        for c in connections.withLock({ $0 }) { try await c.send(text: "bye-before-shutdown") }
        await server.shutdown(timeout: .seconds(60))

        let r = await peer.finish()
        #expect(r.exitCode == 0, "\(r.transcript)")
        let closed = r.events("closed")
        #expect(closed.count == 20, "\(r.transcript)")
        for c in closed {
            #expect(c["code"] as? Int == 1001, "\(c)")
            #expect(c["messages"] as? [any Sendable] as? [String] == ["bye-before-shutdown"], "\(c)")
        }
        #expect(server.statistics.openConnections == 0)
        #expect(await serverEventually { endings.withLock { $0.count } == 20 })
        #expect(endings.withLock { $0 }.allSatisfy { $0 == .goingAway }, "\(endings.withLock { $0 })")
    }

    // MARK: Hostile handshakes

    /// A byte every 300 ms: an idle timeout would never fire, only a deadline on the whole
    /// handshake does. And it is the configured 1 s that fires, not the 10 s default: the bound
    /// on the elapsed time sits just under the default (the trickle lasts longer than the
    /// default, so a server ignoring the setting is caught), leaving 8 s of margin over the
    /// configured second for a slow build on a loaded machine.
    @Test func slowLorisIsCutOffByTheHandshakeTimeout() async throws {
        let defaultTimeout = WebSocketConfiguration().handshakeTimeout
        try await withTestServer({ $0.connection.handshakeTimeout = .seconds(1) },
                                 setup: { $0.route("/echo", handler: echoHandler) }) { _, port in
            let (closed, status, elapsed) = try await onServerTestThread { () -> (Bool, Int?, Duration) in
                // Reads only happen once something arrived: their timeout (60 s) ends a failing run.
                let s = try ServerRawSocket(port: port)
                let request = Array(ServerRawSocket.upgradeRequest(path: "/echo").utf8)
                let start = ContinuousClock.now
                for byte in request.prefix(60) {                     // 18 s or more in all
                    do { try s.send([byte]) } catch { return (true, nil, .now - start) }
                    var p = pollfd(fd: s.fd, events: Int16(POLLIN), revents: 0)
                    if poll(&p, 1, 300) > 0 {
                        // 408 (or a bare close), then EOF.
                        let reply = try? s.readHTTPResponse()
                        let eof = s.readsEOF()
                        return (eof, reply?.status, .now - start)
                    }
                }
                return (false, nil, .now - start)
            }
            #expect(closed, "slow-loris connection still open after \(elapsed)")
            #expect(status == nil || status == 408, "status \(String(describing: status))")
            #expect(elapsed < defaultTimeout - .seconds(1),
                    "cut off only after \(elapsed) (handshake timeout 1 s, default \(defaultTimeout))")
        }
    }

    @Test func headerFloodIsRejectedWith431() async throws {
        try await withTestServer(setup: { $0.route("/echo", handler: echoHandler) }) { server, port in
            let maxHead = server.configuration.httpLimits.maxHeaderBytes
            let reply = try await onServerTestThread { () -> (ServerRawSocket.HTTPReply, Bool) in
                let s = try ServerRawSocket(port: port)
                var head = "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                var i = 0
                while head.utf8.count <= maxHead + 1024 {
                    head += "X-Filler-\(i): \(String(repeating: "a", count: 200))\r\n"
                    i += 1
                }
                try s.send(head)  // never finished with an empty line
                let reply = try s.readHTTPResponse()
                return (reply, s.readsEOF())
            }
            #expect(reply.0.status == 431 || reply.0.status == 400, "\(reply.0.status)")
            #expect(reply.1, "connection not closed after the rejection")
            #expect(server.statistics.rejectedConnections == 1)
        }
    }

    // MARK: Statistics

    @Test func statisticsAreConsistent() async throws {
        try await withTestServer(setup: { server in
            server.route("/echo", handler: echoHandler)
            Self.secureRoute(server)
        }) { server, port in
            let before = server.statistics
            #expect(before.acceptedConnections == 0 && before.messagesIn == 0 && before.rejectedConnections == 0)
            for _ in 0..<2 {
                let r = try await ServerPeer.run("connect", port: port, ["/secure"])
                #expect(r.first("rejected")?["status"] as? Int == 401, "\(r.transcript)")
            }
            let e = try await ServerPeer.run("echo", port: port, ["/echo"])
            #expect(e.first("closed")?["code"] as? Int == 1000, "\(e.transcript)")
            #expect(await serverEventually { server.statistics.openConnections == 0 })
            let s = server.statistics
            #expect(s.acceptedConnections == 1, "\(s)")
            #expect(s.rejectedConnections == 2, "\(s)")
            #expect(s.messagesIn == 2, "\(s)")
            #expect(s.messagesOut == 2, "\(s)")
            #expect(s.bytesIn > 0 && s.bytesOut > 0, "\(s)")
            // Echo: every payload byte that came in went out again (bytesOut counts payloads;
            // bytesIn counts wire bytes, frames and handshake included).
            #expect(s.bytesIn >= s.bytesOut, "\(s)")
            #expect(s.openConnections == 0)
            #expect(s.slowConsumersClosed == 0)
        }
    }
}
}

/// Moves a non-Sendable value between the test task and a blocking thread, used by one at a time.
final class UncheckedBox<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
