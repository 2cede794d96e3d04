import Foundation
import Testing
import SwitchboardCore
@testable import Switchboard

/// The close handshake with messages the application has not read: `close()` returns when the
/// handshake completes, never after a timeout. Every timeout here is an hour, so a regression
/// hangs the test until its time limit instead of passing slowly.
@Suite("RFC 6455 §7 close with unread messages")
struct CloseHandshakeTests {
    static var patient: WebSocketConfiguration {
        var c = WebSocketConfiguration()
        c.closeTimeout = .seconds(3600)
        c.writeStallTimeout = nil
        c.pingInterval = nil
        return c
    }

    static func server() -> WebSocketServer {
        var config = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        config.connection = patient
        config.loopCount = 1
        return WebSocketServer(configuration: config)
    }

    /// The README's client pattern: read one line, stop, close.
    @Test(.timeLimit(.minutes(1)))
    func clientCloseWithUnreadMessagesReturnsWhenTheHandshakeCompletes() async throws {
        let server = Self.server()
        server.route("/lines") { c in
            // More one-line messages than one batch of lines() takes, so some stay queued unread.
            for i in 0..<(LineReader.batchLimit + 50) { try? await c.send(text: "line \(i)\n") }
            for await _ in c.messages() {}
        }
        let port = try await server.start()
        let socket = SocketAdapter()
        let lines = try await socket.connect(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/lines",
                                                                          configuration: Self.patient))
        for await line in lines {
            #expect(String(decoding: line, as: UTF8.self) == "line 0")
            break
        }
        let connection = try #require(await socket.currentConnection)
        #expect(await serverEventually { await connection.queuedMessageCount >= 1 }, "messages are waiting unread")
        await socket.close()
        #expect(await connection.closeStatus?.code == .normalClosure)
        #expect(await connection.error == nil)
        await server.shutdown()
    }

    @Test(.timeLimit(.minutes(1)))
    func serverCloseWithUnreadMessagesReturnsWhenTheHandshakeCompletes() async throws {
        let server = Self.server()
        let (results, result) = AsyncStream<WebSocketCloseStatus?>.makeStream()
        server.route("/") { c in
            _ = try? await c.receive()
            while c.queuedMessageCount < 2 { try? await Task.sleep(for: .milliseconds(5)) }
            await c.close(code: .goingAway, reason: "enough")
            result.yield(c.closeStatus)
        }
        let port = try await server.start()
        let socket = SocketAdapter()
        let messages = try await socket.connectMessages(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/",
                                                                                     configuration: Self.patient))
        for i in 0..<3 { try await socket.send(text: "m\(i)") }
        for await _ in messages {}
        var iterator = results.makeAsyncIterator()
        let status = await iterator.next()
        #expect(status??.code == .goingAway)
        #expect(await socket.closeStatus?.code == .goingAway)
        await server.shutdown()
    }

    @Test(.timeLimit(.minutes(1)))
    func aSecondConcurrentReceiverGetsAnErrorAndTheFirstStillReceives() async throws {
        let server = Self.server()
        let (outcomes, outcome) = AsyncStream<String>.makeStream()
        server.route("/") { c in
            let first = Task { try await c.receive() }
            // Wait until the first receiver is parked, then try a second one.
            while !c.hasWaitingReceiver { try? await Task.sleep(for: .milliseconds(5)) }
            do throws(SwitchboardError) {
                _ = try await c.receive()
                outcome.yield("second receiver got a message")
            } catch {
                outcome.yield("second: \(error.kind)")
            }
            try? await c.send(text: "go")
            let m = try? await first.value
            outcome.yield("first: \(m?.text ?? "nil")")
        }
        let port = try await server.start()
        let socket = SocketAdapter()
        let messages = try await socket.connectMessages(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/",
                                                                                     configuration: Self.patient))
        var iterator = messages.makeAsyncIterator()
        #expect(await iterator.next() == .text(Array("go".utf8)))
        try await socket.send(text: "hello")
        var results = outcomes.makeAsyncIterator()
        #expect(await results.next() == "second: concurrentReceive")
        #expect(await results.next() == "first: hello")
        await socket.close()
        await server.shutdown()
    }
}

/// Both sides stream more than their outbound high-water mark at each other, each reading in a
/// task of its own: nothing deadlocks (no side stops reading only because its own outbound
/// queue is full, which would leave each waiting for the other to read).
@Suite("Full-duplex streaming")
struct FullDuplexStreamingTests {
    // The limit only catches a deadlock, which never ends: alone this takes half a second, but
    // inside the whole suite on 2 cores it took 84–108 s, and over 120 s under
    // ThreadSanitizer (its tasks wait behind every other test's).
    @Test(.timeLimit(.minutes(6)))
    func bothSidesStreamPastTheirHighWaterMarksWithoutDeadlock() async throws {
        var connection = CloseHandshakeTests.patient
        connection.outboundHighWaterMark = 64 << 10
        connection.outboundLowWaterMark = 16 << 10
        connection.inboundHighWaterMark = 64 << 10
        connection.inboundLowWaterMark = 16 << 10
        let chunk = Data(repeating: 0x5A, count: 32 << 10)
        let count = 1024                                  // 32 MiB each way: more than the kernel buffers hold
        var serverConfig = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        serverConfig.connection = connection
        serverConfig.loopCount = 1
        let server = WebSocketServer(configuration: serverConfig)
        let (received, receivedByServer) = AsyncStream<Int>.makeStream()
        server.route("/") { c in
            let reader = Task {
                var bytes = 0
                while let m = try? await c.receive() {
                    bytes += m.payloadCount
                    if bytes == count * chunk.count { break }
                }
                return bytes
            }
            for _ in 0..<count { try? await c.send(binary: chunk) }
            receivedByServer.yield(await reader.value)
            for await _ in c.messages() {}
        }
        let port = try await server.start()
        let socket = SocketAdapter()
        let messages = try await socket.connectMessages(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/",
                                                                                     configuration: connection))
        let clientReader = Task {
            var bytes = 0
            for await m in messages {
                bytes += m.payloadCount
                if bytes == count * chunk.count { break }
            }
            return bytes
        }
        for _ in 0..<count { try await socket.send(binary: chunk) }
        #expect(await clientReader.value == count * chunk.count)
        var serverSide = received.makeAsyncIterator()
        #expect(await serverSide.next() == count * chunk.count)
        await socket.close()
        await server.shutdown()
    }
}
