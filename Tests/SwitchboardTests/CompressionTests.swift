import Foundation
import Testing
@testable import Switchboard
import SwitchboardCore

/// permessage-deflate (RFC 7692) end to end: against Python `websockets` in both directions,
/// between our own client and server (fan-out included), the per-route and per-message
/// opt-outs, and decompression bombs against the `echo-server` example.
extension ServerInterop {
@Suite("permessage-deflate end to end", .serialized)
struct CompressionTests {
    static func compressed(_ mode: PerMessageDeflateConfiguration?) -> (inout WebSocketServerConfiguration) -> Void {
        { $0.connection.compression = mode }
    }

    /// JSON-like text of about `size` bytes.
    static func json(_ size: Int, seed: Int = 0) -> String {
        var text = "["
        var i = seed
        while text.utf8.count < size {
            text += #"{"user":"user\#(i % 7)","room":"lobby","seq":\#(i),"text":"message \#(i) from the test"},"#
            i += 1
        }
        return String(text.prefix(size))
    }

    // MARK: Python websockets as the client

    @Test(arguments: [("shared", "takeover"), ("shared", "none"), ("takeover", "takeover"), ("takeover", "none")])
    func pythonClientNegotiatesAndEchoes(_ serverMode: String, _ clientMode: String) async throws {
        let mode: PerMessageDeflateConfiguration = serverMode == "shared" ? .default : .contextTakeover
        try await withTestServer(Self.compressed(mode), setup: { $0.route("/echo", handler: echoHandler) }) { _, port in
            let r = try await ServerPeer.run("deflate", port: port, ["/echo", clientMode, "20"])
            #expect(r.exitCode == 0, "\(r.transcript)")
            let extensions = try #require(r.first("open")?["extensions"] as? String, "\(r.transcript)")
            switch (serverMode, clientMode) {
            case ("shared", _), ("takeover", "none"):
                #expect(extensions == "permessage-deflate; server_no_context_takeover; client_no_context_takeover")
            default:
                // Python offers client_max_window_bits; a context-takeover server keeps 15 bits.
                #expect(extensions == "permessage-deflate; client_max_window_bits=15")
            }
            let echoes = try #require(r.first("echoes"), "\(r.transcript)")
            #expect(echoes["matched"] as? Int == 20)
            #expect(echoes["binary"] as? Bool == true)
            #expect(r.first("closed")?["code"] as? Int == 1000, "\(r.transcript)")
        }
    }

    @Test func serverWithoutCompressionDeclinesPythonsOffer() async throws {
        try await withTestServer(setup: { $0.route("/echo", handler: echoHandler) }) { _, port in
            let r = try await ServerPeer.run("deflate", port: port, ["/echo", "takeover", "3"])
            #expect(r.exitCode == 0, "\(r.transcript)")
            let open = try #require(r.first("open"), "\(r.transcript)")
            #expect(open["extensions"] as? String == nil, "\(r.transcript)")
            #expect(r.first("echoes")?["matched"] as? Int == 3)
        }
    }

    // MARK: Python websockets as the server

    @Test(arguments: [("takeover", "shared"), ("takeover", "takeover"), ("none", "shared"), ("none", "takeover")])
    func ourClientAgainstPythonServer(_ peerMode: String, _ clientMode: String) async throws {
        try await withInteropPeer(["--deflate", peerMode]) { peer in
            var configuration = WebSocketConfiguration()
            configuration.compression = clientMode == "shared" ? .default : .contextTakeover
            let endpoint = try ClientInteropTests.endpoint(peer.port, "/extensions", configuration: configuration)
            let adapter = SocketAdapter()
            _ = try await adapter.connectMessages(to: endpoint)
            let connection = try #require(await adapter.currentConnection)
            let answer = try #require(try await ClientInteropTests.receive(adapter)?.text)
            #expect(answer.hasPrefix("permessage-deflate"), "peer answered \(answer)")
            let negotiated = try #require(await connection.compression)
            if clientMode == "shared" || peerMode == "none" {
                #expect(negotiated.serverNoContextTakeover && negotiated.clientNoContextTakeover, "\(answer)")
            } else {
                #expect(!negotiated.serverNoContextTakeover && !negotiated.clientNoContextTakeover, "\(answer)")
            }
            for i in 0..<20 {
                let text = Self.json(512 * (1 + i % 5), seed: i)
                try await connection.send(text: text)
                #expect(try await ClientInteropTests.receive(adapter)?.text == text)
            }
            let blob = Data((0..<50_000).map { UInt8(truncatingIfNeeded: $0 % 251) })
            try await connection.send(binary: blob)
            #expect(try await ClientInteropTests.receive(adapter) == .binary([UInt8](blob)))
            await adapter.close()
        }
    }

    // MARK: Our client and server

    @Test func fanOutReachesSubscribersOfEveryModeIntact() async throws {
        try await withTestServer(Self.compressed(.default), setup: { server in
            server.route("/room") { [server] c in
                server.subscribe(c, to: "room")
                try await c.send(text: "subscribed")
                for await m in c.messages() { await server.publish(m, to: "room", excluding: c) }
            }
        }) { server, port in
            let modes: [PerMessageDeflateConfiguration?] = [.default, .default, .contextTakeover, nil,
                                                            PerMessageDeflateConfiguration(mode: .contextTakeover(windowBits: 10))]
            var adapters: [SocketAdapter] = []
            for mode in modes {
                var configuration = WebSocketConfiguration()
                configuration.compression = mode
                let adapter = SocketAdapter()
                _ = try await adapter.connectMessages(to: try ClientInteropTests.endpoint(port, "/room", configuration: configuration))
                #expect(try await ClientInteropTests.receive(adapter)?.text == "subscribed")
                let negotiated = await adapter.currentConnection?.compression
                #expect((negotiated != nil) == (mode != nil))
                adapters.append(adapter)
            }
            // The server's default mode answers no context takeover whatever the client offered;
            // a client that limited its window keeps that limit.
            #expect(await adapters[4].currentConnection?.compression?.clientMaxWindowBits == 15)
            let publisher = try #require(await adapters[0].currentConnection)
            for i in 0..<5 {
                let text = Self.json(300 + 700 * i, seed: i)
                try await publisher.send(text: text)
                for adapter in adapters.dropFirst() {
                    #expect(try await ClientInteropTests.receive(adapter)?.text == text)
                }
            }
            #expect(server.subscriberCount(of: "room") == modes.count)
            for adapter in adapters { await adapter.close() }
        }
    }

    /// A publish compresses once per set of shared-compressor parameters: every subscriber with
    /// the same parameters gets the same bytes, which inflate to the message.
    @Test func publicationIsCompressedOncePerParameterSet() throws {
        let text = Array(Self.json(3000).utf8)
        let publication = TopicPublication(topic: "t", opcode: .text, payload: text, compress: true)
        let streams = PerMessageDeflateSharedStreams()
        let key15 = PerMessageDeflateSharedStreams.CompressorKey(windowBits: 15, level: 6, memoryLevel: 8)
        let key10 = PerMessageDeflateSharedStreams.CompressorKey(windowBits: 10, level: 6, memoryLevel: 8)
        let a = try #require(publication.compressedFrame(for: key15, streams: streams))
        let b = try #require(publication.compressedFrame(for: key15, streams: PerMessageDeflateSharedStreams()))
        #expect(a == b)
        #expect(a[0] == 0xC1, "FIN, RSV1, text")
        let c = try #require(publication.compressedFrame(for: key10, streams: streams))
        for frame in [a, c] {
            let headerLength = frame[1] == 126 ? 4 : 2
            let body = Array(frame[headerLength...])
            let decompressor = try #require(DeflateDecompressor())
            #expect(try body.withUnsafeBytes { try decompressor.decompress($0, limit: 1 << 20) } == text)
        }
    }

    @Test func routeOptOutDeclinesTheOffer() async throws {
        try await withTestServer(Self.compressed(.default), setup: { server in
            server.route("/plain", compression: false, handler: echoHandler)
            server.route("/deflate", handler: echoHandler)
        }) { _, port in
            let offer = "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits"
            let answers = try await onServerTestThread { () -> [String?] in
                try ["/plain", "/deflate"].map { path in
                    let socket = try ServerRawSocket(port: port)
                    try socket.send(ServerRawSocket.upgradeRequest(path: path, extraHeaders: [offer]))
                    let reply = try socket.readHTTPResponse()
                    guard reply.status == 101 else { throw ServerRawSocket.Failure("status \(reply.status)") }
                    return reply.header("Sec-WebSocket-Extensions")
                }
            }
            #expect(answers[0] == nil)
            #expect(answers[1] == "permessage-deflate; server_no_context_takeover; client_no_context_takeover")
        }
    }

    /// RSV1 on the wire: set for a compressed message, clear for one sent with `compress: false`
    /// or below the threshold; a compressed message from the client is inflated.
    @Test func perMessageOptOutAndThresholdLeaveRSV1Clear() async throws {
        let big = Self.json(2000)
        try await withTestServer(Self.compressed(.default), setup: { server in
            server.route("/send") { c in
                for await m in c.messages() {
                    guard let text = m.text else { continue }
                    try await c.send(text: text, compress: true)
                    try await c.send(text: text, compress: false)
                    try await c.send(text: "small")
                }
            }
        }) { _, port in
            let result = try await onServerTestThread { () -> [ServerRawSocket.Frame] in
                let socket = try ServerRawSocket(port: port)
                try socket.handshake(path: "/send", extraHeaders: ["Sec-WebSocket-Extensions: permessage-deflate"])
                // A compressed message from the client.
                let compressor = DeflateCompressor(level: 6, windowBits: 15, memoryLevel: 8)
                let body = try Array(big.utf8).withUnsafeBytes { raw in
                    guard let b = compressor?.compress(raw, reset: true) else { throw ServerRawSocket.Failure("zlib") }
                    return b
                }
                try socket.send(WebSocketFrameSerializer.frame(opcode: .text, rsv: 0b100, payload: body,
                                                               maskingKey: WebSocketMaskingKey(1, 2, 3, 4)))
                return try (0..<3).map { _ in try socket.readFrame() }
            }
            #expect(result.map(\.rsv) == [0b100, 0, 0])
            #expect(result[0].payload.count < big.utf8.count / 2)
            let decompressor = try #require(DeflateDecompressor())
            let inflated = try result[0].payload.withUnsafeBytes { try decompressor.decompress($0, limit: 1 << 20) }
            #expect(String(decoding: inflated, as: UTF8.self) == big)
            #expect(String(decoding: result[1].payload, as: UTF8.self) == big)
            #expect(String(decoding: result[2].payload, as: UTF8.self) == "small")
        }
    }

    // MARK: Decompression bombs

    /// Small compressed messages that inflate far past the limit, in one frame and spread over
    /// many fragments, from many connections at once: each is closed with 1009, the server stays
    /// up and its memory does not grow by anything near what the bombs would inflate to.
    @Test(arguments: ["tasks", "callbacks"])
    func decompressionBombsCloseWith1009AndMemoryStaysBounded(_ api: String) async throws {
        let server = try await ChildServer.start("echo-server", ["--port", "0", "--api", api, "--ping-interval", "0",
                                                                 "--max-message-size", "\(1 << 20)"])
        defer { server.stop() }
        let port = server.port, pid = server.pid
        // 64 MiB of zeros deflate to about 64 KiB: 20 connections would inflate 1.25 GiB.
        let zeros = [UInt8](repeating: 0, count: 64 << 20)
        let body = try zeros.withUnsafeBytes { raw in
            try #require(DeflateCompressor(level: 9, windowBits: 15, memoryLevel: 9)?.compress(raw, reset: true))
        }
        #expect(body.count < 1 << 20)
        let outcome = try await onServerTestThread { () -> (codes: [Int?], baseline: Int, peak: Int) in
            var sockets: [ServerRawSocket] = []
            for _ in 0..<20 {
                let s = try ServerRawSocket(port: port)
                try s.handshake(path: "/", extraHeaders: ["Sec-WebSocket-Extensions: permessage-deflate"])
                sockets.append(s)
            }
            let baseline = ChildServer.residentBytes(pid: pid) ?? 0
            var peak = baseline
            let key = WebSocketMaskingKey(9, 8, 7, 6)
            for (i, s) in sockets.enumerated() {
                var wire: [UInt8] = []
                if i % 2 == 0 {
                    WebSocketFrameSerializer.writeFrame(opcode: .binary, rsv: 0b100, payload: body, maskingKey: key, into: &wire)
                } else {
                    // Fragments of 4 KiB: the limit holds across fragments.
                    var offset = 0
                    while offset < body.count {
                        let end = min(body.count, offset + 4096)
                        WebSocketFrameSerializer.writeFrame(opcode: offset == 0 ? .binary : .continuation,
                                                            fin: end == body.count, rsv: offset == 0 ? 0b100 : 0,
                                                            payload: Array(body[offset..<end]), maskingKey: key, into: &wire)
                        offset = end
                    }
                }
                try s.send(wire)
                if let rss = ChildServer.residentBytes(pid: pid), rss > peak { peak = rss }
            }
            var codes: [Int?] = []
            for s in sockets {
                codes.append(try s.readUntilCloseFrame().closeCode)
                if let rss = ChildServer.residentBytes(pid: pid), rss > peak { peak = rss }
            }
            return (codes, baseline, peak)
        }
        #expect(outcome.codes == Array(repeating: 1009, count: 20))
        let growth = outcome.peak - outcome.baseline
        print("decompression bombs (\(api)): server RSS \(outcome.baseline >> 20) MiB → peak \(outcome.peak >> 20) MiB")
        #expect(growth < TestEnvironment.sized(64 << 20, tsan: 128 << 20), "grew \(growth >> 20) MiB")
        #expect(server.isRunning)
        // Still serving: a fresh connection echoes.
        let echoed = try await onServerTestThread { () -> String in
            let s = try ServerRawSocket(port: port)
            try s.handshake()
            try s.send(ServerRawSocket.frame(opcode: 0x1, payload: Array("alive".utf8)))
            return String(decoding: try s.readFrame().payload, as: UTF8.self)
        }
        #expect(echoed == "alive")
    }
}
}
