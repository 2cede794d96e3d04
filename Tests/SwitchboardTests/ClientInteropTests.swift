#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Testing
import SwitchboardCore
@testable import Switchboard

/// Our client against a peer nobody here wrote: a Python `websockets` server
/// (`Peers/ws_echo_server.py`). Serialized: each test starts its own peer process, and the
/// cancellation test counts this process's open sockets.
@Suite("Client interop with Python websockets", .serialized)
struct ClientInteropTests {
    // MARK: Helpers

    static func endpoint(_ port: Int, _ path: String, scheme: String = "ws", host: String = "127.0.0.1",
                         headers: [(name: String, value: String)] = [], tls: TLSConfiguration = .default,
                         configuration: WebSocketConfiguration = .default) throws -> WebSocketURLEndpoint {
        try WebSocketURLEndpoint(url: "\(scheme)://\(host):\(port)\(path)", headers: headers, tls: tls,
                                 configuration: configuration)
    }

    /// The next whole message of the adapter's connection, bounded in time (generously: the bound
    /// only ends a failing run).
    static func receive(_ adapter: SocketAdapter, timeout: Duration = .seconds(60)) async throws -> WebSocketMessage? {
        guard let connection = await adapter.currentConnection else {
            Issue.record("no current connection")
            return nil
        }
        return try await withInteropTimeout(timeout, "receive") { try await connection.receive() }
    }

    /// Connects expecting failure; returns the error (records an issue on success).
    static func connectError(_ endpoint: some SocketEndpoint,
                             sourceLocation: SourceLocation = #_sourceLocation) async -> SwitchboardError? {
        let adapter = SocketAdapter()
        do throws(SwitchboardError) {
            _ = try await adapter.connect(to: endpoint)
            Issue.record("connect unexpectedly succeeded", sourceLocation: sourceLocation)
            await adapter.close()
            return nil
        } catch {
            return error
        }
    }

    /// Must match `many_line` in the peer script.
    static func manyLine(_ i: Int) -> String {
        "{\"seq\":\(i),\"pad\":\"\(String(repeating: "x", count: i % 37))\"}"
    }

    struct RawCommand: SocketCommand {
        var message: String
    }

    struct JoinCommand: JSONSocketCommand {
        var room: String
        var user: String
    }

    // MARK: Echo

    @Test func textAndBinaryRoundTrip() async throws {
        try await withInteropPeer { peer in
            let adapter = SocketAdapter()
            _ = try await adapter.connectMessages(to: Self.endpoint(peer.port, "/echo"))
            let text = "héllo, wörld 🌍 — \u{0}end"
            try await adapter.send(text: text)
            #expect(try await Self.receive(adapter) == .text(Array(text.utf8)))

            let bytes = Data((0..<1000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
            try await adapter.send(binary: bytes)
            #expect(try await Self.receive(adapter) == .binary([UInt8](bytes)))

            try await adapter.send(text: "")
            #expect(try await Self.receive(adapter) == .text([]))
            try await adapter.send(binary: Data())
            #expect(try await Self.receive(adapter) == .binary([]))

            await adapter.close()
            #expect(await adapter.closeStatus?.code == .normalClosure)
            #expect(await adapter.lastError == nil)
        }
    }

    @Test func tenMebibyteBinaryRoundTrip() async throws {
        try await withInteropPeer { peer in
            var configuration = WebSocketConfiguration()
            configuration.protocolLimits = WebSocketProtocolLimits(maxFrameSize: 32 << 20, maxMessageSize: 32 << 20)
            let adapter = SocketAdapter()
            _ = try await adapter.connectMessages(to: Self.endpoint(peer.port, "/echo", configuration: configuration))

            let size = 10 << 20
            var payload = Data(count: size)
            payload.withUnsafeMutableBytes { raw in
                var state: UInt64 = 0x9E37_79B9_7F4A_7C15
                let words = raw.bindMemory(to: UInt64.self)
                for i in 0..<words.count {
                    state ^= state << 13; state ^= state >> 7; state ^= state << 17
                    words[i] = state
                }
            }
            try await adapter.send(binary: payload)
            let echoed = try await Self.receive(adapter, timeout: .seconds(180))
            guard case .binary(let bytes)? = echoed else {
                Issue.record("expected a binary message, got \(String(describing: echoed.map { "\($0.payloadCount) bytes" }))")
                return
            }
            #expect(bytes.count == size)
            #expect(Data(bytes) == payload, "10 MiB echo differs")
            // Still usable afterwards.
            try await adapter.send(text: "after")
            #expect(try await Self.receive(adapter) == .text(Array("after".utf8)))
            await adapter.close()
        }
    }

    // MARK: Lines

    @Test func linesSplitAcrossAndWithinMessages() async throws {
        try await withInteropPeer { peer in
            let adapter = SocketAdapter()
            let lines = try await adapter.connect(to: Self.endpoint(peer.port, "/lines"))
            try await adapter.send(text: "send-split")
            let got = try await collectLines(lines, until: "END")
            #expect(got == [
                #"{"a":1}"#, #"{"b":2}"#, #"{"c":3}"#, #"{"d":4}"#, #"{"e":5}"#, #"{"f":6}"#,
                #"{"g":"x y"}"#, #"{"h":8}"#, "END",
            ])
            #expect(!got.contains { $0.contains("\r") || $0.contains("\n") })
            await adapter.close()
        }
    }

    @Test func tenThousandLinesKeepTheirOrder() async throws {
        try await withInteropPeer { peer in
            let adapter = SocketAdapter()
            let lines = try await adapter.connect(to: Self.endpoint(peer.port, "/lines"))
            let n = 10_000
            try await adapter.send(text: "send-many \(n)")
            let got = try await collectLines(lines, until: "END", timeout: .seconds(180))
            let expected = (0..<n).map(Self.manyLine) + ["END"]
            #expect(got.count == expected.count)
            let firstDifference = zip(got, expected).enumerated().first { $0.element.0 != $0.element.1 }
            #expect(firstDifference == nil,
                    "line \(firstDifference?.offset ?? -1): got \(firstDifference?.element.0 ?? "") expected \(firstDifference?.element.1 ?? "")")
            await adapter.close()
        }
    }

    // MARK: Typed commands

    @Test func typedCommandsArriveAsOneLineEach() async throws {
        try await withInteropPeer { peer in
            // Message level: the newline is appended exactly once.
            let adapter = SocketAdapter()
            _ = try await adapter.connectMessages(to: Self.endpoint(peer.port, "/echo"))
            try await adapter.send(command: RawCommand(message: #"{"op":"ping"}"#))
            #expect(try await Self.receive(adapter)?.text == "{\"op\":\"ping\"}\n")
            try await adapter.send(command: RawCommand(message: "already terminated\n"))
            #expect(try await Self.receive(adapter)?.text == "already terminated\n")
            try await adapter.send(command: JoinCommand(room: "general", user: "alice/ü"))
            #expect(try await Self.receive(adapter)?.text == "{\"room\":\"general\",\"user\":\"alice/ü\"}\n")
            await adapter.close()

            // Line level: one line per command.
            let lineAdapter = SocketAdapter()
            let lines = try await lineAdapter.connect(to: Self.endpoint(peer.port, "/echo"))
            try await lineAdapter.send(command: RawCommand(message: #"{"op":"ping"}"#))
            try await lineAdapter.send(command: JoinCommand(room: "general", user: "bob"))
            try await lineAdapter.send(command: RawCommand(message: "END"))
            let got = try await collectLines(lines, until: "END")
            #expect(got == [#"{"op":"ping"}"#, #"{"room":"general","user":"bob"}"#, "END"])
            await lineAdapter.close()
        }
    }

    // MARK: Ping

    @Test func pingKeepsTheConnectionUsable() async throws {
        try await withInteropPeer { peer in
            let adapter = SocketAdapter()
            _ = try await adapter.connectMessages(to: Self.endpoint(peer.port, "/echo"))
            try await adapter.ping()
            try await adapter.ping(Data("payload".utf8))
            try await adapter.send(text: "still here")
            #expect(try await Self.receive(adapter)?.text == "still here")
            try await adapter.ping(Data(repeating: 0xAB, count: 125))
            try await adapter.send(binary: Data([1, 2, 3]))
            #expect(try await Self.receive(adapter) == .binary([1, 2, 3]))
            #expect(await adapter.currentConnection?.isOpen == true)
            await adapter.close()
        }
    }

    // MARK: Close

    @Test(arguments: [(UInt16(1000), "client done ✓"), (UInt16(4100), "custom code")])
    func clientCloseIsSeenByThePeer(code: UInt16, reason: String) async throws {
        try await withInteropPeer { peer in
            let adapter = SocketAdapter()
            _ = try await adapter.connectMessages(to: Self.endpoint(peer.port, "/record-close"))
            try await adapter.send(text: "hello")
            #expect(try await Self.receive(adapter)?.text == "hello")
            await adapter.close(code: WebSocketCloseCode(rawValue: code), reason: reason)
            let line = try await peer.line(startingWith: "CLOSED")
            #expect(line == "CLOSED \(code) \(reason)")
            let status = await adapter.closeStatus
            #expect(status?.code.rawValue == code)
            #expect(status?.reason == reason)
            #expect(await adapter.lastError == nil)
        }
    }

    @Test func serverCloseFinishesTheLines() async throws {
        try await withInteropPeer { peer in
            let adapter = SocketAdapter()
            let lines = try await adapter.connect(to: Self.endpoint(peer.port, "/close"))
            try await adapter.send(text: "anything\n")
            let count = try await withInteropTimeout(.seconds(60), "lines stream to finish") {
                var n = 0
                for await _ in lines { n += 1 }
                return n
            }
            #expect(count == 0)
            let status = await adapter.closeStatus
            #expect(status?.code.rawValue == 4001)
            #expect(status?.reason == "bye")
            #expect(await adapter.lastError == nil)
            // Sending after the server closed.
            await #expect(throws: SwitchboardError.notConnected) {
                try await adapter.send(command: RawCommand(message: "late"))
            }
        }
    }

    @Test func sendBeforeConnectAndAfterCloseIsNotConnected() async throws {
        let adapter = SocketAdapter()
        do throws(SwitchboardError) {
            try await adapter.send(command: RawCommand(message: "early"))
            Issue.record("send before connect succeeded")
        } catch {
            #expect(error.kind == .notConnected)
        }
        try await withInteropPeer { peer in
            _ = try await adapter.connect(to: Self.endpoint(peer.port, "/echo"))
            try await adapter.send(command: RawCommand(message: "while open"))
            await adapter.close()
            do throws(SwitchboardError) {
                try await adapter.send(command: RawCommand(message: "late"))
                Issue.record("send after close succeeded")
            } catch {
                #expect(error.kind == .notConnected)
            }
            await adapter.close()  // idempotent
        }
    }

    // MARK: TLS

    static var tlsPeerArguments: [String] {
        get throws {
            let pki = try TestPKI.get()
            return ["--tls-cert", pki.serverCertificate, "--tls-key", pki.serverKey]
        }
    }

    @Test func tlsRoundTripWithTheTestCA() async throws {
        let pki = try TestPKI.get()
        try await withInteropPeer(Self.tlsPeerArguments) { peer in
            let adapter = SocketAdapter()
            let endpoint = try Self.endpoint(peer.port, "/echo", scheme: "wss", host: "localhost",
                                             tls: TLSConfiguration(trustRoots: .caFile(pki.caCertificate)))
            _ = try await adapter.connectMessages(to: endpoint)
            try await adapter.send(text: "over TLS")
            #expect(try await Self.receive(adapter)?.text == "over TLS")
            let big = Data((0..<200_000).map { UInt8(truncatingIfNeeded: $0 >> 3) })
            try await adapter.send(binary: big)
            #expect(try await Self.receive(adapter)?.data == big)
            await adapter.close()
            #expect(await adapter.closeStatus?.code == .normalClosure)
        }
    }

    @Test func tlsWithSystemTrustFailsVerification() async throws {
        try await withInteropPeer(Self.tlsPeerArguments) { peer in
            let endpoint = try Self.endpoint(peer.port, "/echo", scheme: "wss", host: "localhost")
            let error = await Self.connectError(endpoint)
            #expect(error?.kind == .tls)
            #expect(error?.message.lowercased().contains("verify") == true, "\(String(describing: error))")
        }
    }

    @Test func tlsWithTheWrongHostnameFails() async throws {
        let pki = try TestPKI.get()
        try await withInteropPeer(Self.tlsPeerArguments) { peer in
            var tls = TLSConfiguration(trustRoots: .caFile(pki.caCertificate))
            tls.serverNameOverride = "example.com"
            let endpoint = try Self.endpoint(peer.port, "/echo", scheme: "wss", host: "127.0.0.1", tls: tls)
            let error = await Self.connectError(endpoint)
            #expect(error?.kind == .tls, "\(String(describing: error))")
        }
    }

    // MARK: Handshake and connect failures

    @Test func handshakeRejectedCarriesStatusAndBody() async throws {
        try await withInteropPeer { peer in
            let error = await Self.connectError(try Self.endpoint(peer.port, "/forbidden"))
            #expect(error?.kind == .handshakeRejected)
            #expect(error?.httpStatus == 403)
            #expect(error?.httpBody?.contains("forbidden: peer says no") == true, "\(String(describing: error))")
            #expect(error.map { "\($0)" }?.contains("forbidden: peer says no") == true)
        }
    }

    @Test func connectToAClosedPortFails() async throws {
        let error = try await withClosedPort { port in await Self.connectError(try Self.endpoint(port, "/echo")) }
        #expect(error?.kind == .connect, "\(String(describing: error))")
        #expect(error?.errno == ECONNREFUSED)
    }

    @Test func unresolvableHostFailsWithDNS() async throws {
        let error = await Self.connectError(try Self.endpoint(80, "/", host: "no-such-host.invalid"))
        #expect(error?.kind == .dns, "\(String(describing: error))")
    }

    // MARK: Cancellation

    @Test func cancellingAStalledHandshakeIsPromptAndLeaksNoSocket() async throws {
        try await withInteropPeer(["--silent"]) { peer in
            var configuration = WebSocketConfiguration()
            // Far above anything cancellation may take, however slow the build: ending with
            // `.cancelled` rather than `.timedOut` then shows cancellation was honoured.
            configuration.handshakeTimeout = .seconds(60)
            let endpoint = try Self.endpoint(peer.port, "/", configuration: configuration)
            let before = processSocketCount(port: peer.port)
            #expect(before >= 0)
            for _ in 0..<3 {
                let adapter = SocketAdapter()
                let task = Task { try await adapter.connect(to: endpoint) }
                // Cancel once the counter sees our half-open connection (so "after <= before"
                // means something, and the handshake, not the TCP connect, is what is cancelled).
                let opened = await waitWhileProgressing(stall: .seconds(30), { processSocketCount(port: peer.port) },
                                                        until: { $0 > before })
                #expect(opened, "the connection never showed up")
                // No wall-clock bound (speed belongs to benchmarks).
                task.cancel()
                let result = await task.result
                switch result {
                case .success:
                    Issue.record("connect to a silent server succeeded")
                case .failure(let error):
                    #expect((error as? SwitchboardError)?.kind == .cancelled, "\(error)")
                }
            }
            // Closing happens on the loop thread: allow it to settle (a leak never does).
            var after = processSocketCount(port: peer.port)
            let deadline = ContinuousClock.now + .seconds(60)
            while after > before && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
                after = processSocketCount(port: peer.port)
            }
            #expect(after <= before, "open sockets before \(before), after \(after)")
        }
    }

    // MARK: Secrets

    @Test func bearerTokenNeverAppearsInDescriptions() async throws {
        let secret = "SECRET-TOKEN-123"
        let headers = [(name: "Authorization", value: "Bearer \(secret)")]
        try await withInteropPeer { peer in
            let rejected = try Self.endpoint(peer.port, "/unauthorized", headers: headers)
            let adapter = SocketAdapter()
            do throws(SwitchboardError) {
                _ = try await adapter.connect(to: rejected)
                Issue.record("connect to /unauthorized succeeded")
            } catch {
                #expect(error.kind == .handshakeRejected)
                #expect(error.httpStatus == 401)
                for text in ["\(error)", String(reflecting: error), error.message, error.httpBody ?? "",
                             error.localizedDescription, "\(Error?.some(error) as Any)"] {
                    #expect(!text.contains(secret), "error text leaks the token: \(text)")
                }
            }
            let last = await adapter.lastError
            #expect(!String(reflecting: last as Any).contains(secret))

            // The endpoint and an open connection describe themselves without the token too.
            let accepted = try Self.endpoint(peer.port, "/echo", headers: headers)
            for text in ["\(accepted)", String(reflecting: accepted), "\(rejected)", "\(Mirror(reflecting: accepted).children.map { $0.value })"] {
                #expect(!text.contains(secret), "endpoint description leaks the token: \(text.prefix(200))…")
            }
            _ = try await adapter.connectMessages(to: accepted)
            let connection = try #require(await adapter.currentConnection)
            for text in ["\(connection)", String(reflecting: connection)] {
                #expect(!text.contains(secret), "connection description leaks the token: \(text)")
            }
            await adapter.close()
        }
    }
}
