import Foundation
import Testing
import SwitchboardCore
@testable import Switchboard

/// The server's limits hold for sockets that have not upgraded yet, and its endings are clean.
@Suite("Server hardening: connection cap, handshake deadline, TLS close_notify, statistics")
struct ServerHardeningTests {
    static func server(_ configure: (inout WebSocketServerConfiguration) -> Void = { _ in }) -> WebSocketServer {
        var config = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        config.loopCount = 1
        configure(&config)
        return WebSocketServer(configuration: config)
    }

    /// Sends an upgrade request on a new socket and returns the server's HTTP answer.
    static func upgrade(port: Int, timeout: Double = 60) async throws -> ServerRawSocket.HTTPReply {
        try await onServerTestThread {
            let s = try ServerRawSocket(port: port, timeout: timeout)
            defer { s.close() }
            try s.send(ServerRawSocket.upgradeRequest())
            return try s.readHTTPResponse()
        }
    }

    @Test func handshakesInProgressCountTowardMaxConnections() async throws {
        // The stalled sockets must hold their places for the whole test: no handshake timeout
        // (default 10 s) may free one, however slow the build.
        let server = Self.server {
            $0.maxConnections = 2
            $0.connection.handshakeTimeout = .seconds(3600)
        }
        server.route("/") { c in for await _ in c.messages() {} }
        let port = try await server.start()
        // Two sockets that never send their request hold both places.
        let stalled = try [ServerRawSocket(port: port), ServerRawSocket(port: port)]
        #expect(await serverEventually { server.counters.sockets.load(ordering: .relaxed) == 2 })
        #expect(try await Self.upgrade(port: port).status == 503)
        // One stalled socket leaves: its place is free again.
        stalled[0].close()
        #expect(await serverEventually { server.counters.sockets.load(ordering: .relaxed) == 1 })
        #expect(try await Self.upgrade(port: port).status == 101)
        stalled[1].close()
        await server.shutdown()
    }

    @Test func tlsSocketsOverMaxConnectionsAreClosedAtOnceWithoutAHandshake() async throws {
        // A long handshake timeout: a socket the server kept waiting for its TLS handshake would
        // stay open far beyond the client's guard below.
        let pki = try TestPKI.get()
        let server = Self.server {
            $0.tls = TLSServerConfiguration(certificateChainFile: pki.serverCertificate, privateKeyFile: pki.serverKey)
            $0.maxConnections = 2
            $0.connection.handshakeTimeout = .seconds(3600)
        }
        server.route("/") { c in for await _ in c.messages() {} }
        let port = try await server.start()
        let holders = try [ServerRawSocket(port: port), ServerRawSocket(port: port)]
        #expect(await serverEventually { server.counters.sockets.load(ordering: .relaxed) == 2 })
        // A third TLS client, which speaks first in TLS: closed at once, with no handshake (a
        // plain-text 503 would mean nothing to it), and counted. The 60 s read timeout is a
        // failure guard only.
        let closed = try await onServerTestThread { () -> Bool in
            let s = try ServerRawSocket(port: port, timeout: 60)
            defer { s.close() }
            return s.readsEOF()
        }
        #expect(closed)
        #expect(server.statistics.rejectedConnections == 1)
        #expect(server.counters.sockets.load(ordering: .relaxed) == 2)
        // A place frees up: a TLS client gets in again.
        holders[0].close()
        #expect(await serverEventually { server.counters.sockets.load(ordering: .relaxed) == 1 })
        let socket = SocketAdapter()
        _ = try await socket.connectMessages(to: try WebSocketURLEndpoint(
            url: "wss://127.0.0.1:\(port)/", tls: TLSConfiguration(trustRoots: .caFile(pki.caCertificate))))
        #expect(await serverEventually { server.statistics.openConnections == 1 })
        await socket.close()
        holders[1].close()
        await server.shutdown()
    }

    @Test func authenticateIsBoundedByTheHandshakeTimeout() async throws {
        // The timer runs from the accept: the request must be read and parsed before it fires,
        // or the answer is 408 (request timeout) instead of 503. That step is one loop iteration
        // of milliseconds, but 200 ms was within reach of a scheduling stall on a loaded
        // ThreadSanitizer build; 5 s is not. The hook never answers, so the timer firing during
        // it is certain.
        let server = Self.server { $0.connection.handshakeTimeout = .seconds(5) }
        let (release, releaser) = AsyncStream<Void>.makeStream()
        server.route("/", authenticate: { _ in
            for await _ in release {}          // a hook that never answers (until the test ends)
            return .accept()
        }) { c in for await _ in c.messages() {} }
        let port = try await server.start()
        let reply = try await Self.upgrade(port: port)
        #expect(reply.status == 503)
        let body = try JSONSerialization.jsonObject(with: Data(reply.body)) as? [String: [String: Any]]
        #expect(body?["error"]?["code"] as? String == "timeout")
        #expect(await serverEventually { server.counters.sockets.load(ordering: .relaxed) == 0 })
        releaser.finish()
        await server.shutdown()
    }

    @Test func tlsServerEndsWithCloseNotify() async throws {
        let pki = try TestPKI.get()
        let server = Self.server {
            $0.tls = TLSServerConfiguration(certificateChainFile: pki.serverCertificate, privateKeyFile: pki.serverKey)
        }
        server.route("/") { c in for await _ in c.messages() {} }
        let port = try await server.start()
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("Peers/tls_close_notify.py").path
        let output = try await onServerTestThread { () -> String in
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            p.arguments = ["python3", script, "\(port)", pki.caCertificate]
            let out = Pipe()
            p.standardOutput = out
            try p.run()
            let data = out.fileHandleForReading.readDataToEndOfFile()
            p.waitUntilExit()
            return String(decoding: data, as: UTF8.self)
        }
        let result = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any]
        #expect(result?["status"] as? Int == 101, "\(output)")
        #expect(result?["close"] as? Int == 1000, "\(output)")
        #expect(result?["ending"] as? String == "close_notify", "\(output)")
        await server.shutdown()
    }

    @Test func statisticsCountPayloadBytesInBothDirections() async throws {
        let server = Self.server()
        server.route("/") { c in
            for await m in c.messages() { try? await c.send(m) }
        }
        let port = try await server.start()
        let socket = SocketAdapter()
        let messages = try await socket.connectMessages(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/"))
        var iterator = messages.makeAsyncIterator()
        try await socket.send(text: "hello")                 // 5 bytes
        _ = await iterator.next()
        try await socket.send(binary: Data([1, 2, 3]))       // 3 bytes
        _ = await iterator.next()
        let stats = server.statistics
        #expect(stats.messagesIn == 2)
        #expect(stats.messagesOut == 2)
        #expect(stats.bytesIn == 8)
        #expect(stats.bytesOut == 8)
        await socket.close()
        await server.shutdown()
    }

    @Test func publishQueuesTheSameFrameOnEverySubscriberAndRefusesInvalidText() async throws {
        let server = Self.server()
        server.route("/") { [server] c in
            server.subscribe(c, to: "t")
            for await _ in c.messages() {}
        }
        let port = try await server.start()
        var streams: [AsyncStream<WebSocketMessage>] = []
        var sockets: [SocketAdapter] = []
        for _ in 0..<3 {
            let socket = SocketAdapter()
            streams.append(try await socket.connectMessages(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/")))
            sockets.append(socket)
        }
        #expect(await serverEventually { server.subscriberCount(of: "t") == 3 })
        #expect(await server.publish(.text([0xC3, 0x28]), to: "t") == 0)     // not UTF-8: queued nowhere
        #expect(await server.publish(text: "héllo", to: "t") == 3)
        #expect(await server.publish(.binary([1, 2, 3]), to: "t") == 3)
        for stream in streams {
            var iterator = stream.makeAsyncIterator()
            #expect(await iterator.next() == .text(Array("héllo".utf8)))
            #expect(await iterator.next() == .binary([1, 2, 3]))
        }
        #expect(server.statistics.messagesOut == 6)
        #expect(server.statistics.bytesOut == 3 * (6 + 3))
        for socket in sockets { await socket.close() }
        await server.shutdown()
    }
}
