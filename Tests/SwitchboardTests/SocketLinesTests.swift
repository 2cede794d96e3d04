import Foundation
import Switchboard
import SwitchboardCore
import Testing

/// `SocketAdapter.connectLines(to:)`: the same lines and ending as `connect(to:)`'s
/// `AsyncStream<Data>`, taken on the caller's executor.
@Suite struct SocketLinesTests {
    static func linesServer() -> WebSocketServer {
        let server = CloseHandshakeTests.server()
        server.route("/lines") { c in
            // Lines spanning messages, CRLF, an empty line (skipped), an unterminated last line.
            for part in ["a\nb", "c\n", "\r\nd\r\n", "e"] { try? await c.send(text: part) }
            await c.close(code: .normalClosure, reason: "done")
        }
        server.route("/echo") { c in
            while let m = try? await c.receive() {
                if let text = m.text { try? await c.send(text: text) }
            }
        }
        return server
    }

    @Test(.timeLimit(.minutes(1)))
    func theSequenceAndTheStreamGiveTheSameLines() async throws {
        let server = Self.linesServer()
        let port = try await server.start()
        let endpoint = try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/lines")

        let viaSequence = SocketAdapter()
        var fromSequence: [String] = []
        for await line in try await viaSequence.connectLines(to: endpoint) {
            fromSequence.append(String(decoding: line, as: UTF8.self))
        }
        let viaStream = SocketAdapter()
        var fromStream: [String] = []
        for await line in try await viaStream.connect(to: endpoint) {
            fromStream.append(String(decoding: line, as: UTF8.self))
        }
        #expect(fromSequence == ["a", "bc", "d", "e"])
        #expect(fromStream == fromSequence)
        #expect(await viaSequence.closeStatus?.code == .normalClosure)
        await server.shutdown()
    }

    /// The loop of a command-line tool's top-level code: on the main actor, a reply per line.
    @MainActor @Test(.timeLimit(.minutes(1)))
    func aReplyLoopOnTheMainActorGetsEveryAnswerInOrder() async throws {
        struct Numbered: SocketCommand { var message: String }
        let server = Self.linesServer()
        let port = try await server.start()
        let socket = SocketAdapter()
        let lines = try await socket.connectLines(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/echo"))
        for i in 0..<8 { try await socket.send(command: Numbered(message: "\(i)")) }
        var received: [Int] = []
        var next = 8
        for await line in lines {
            MainActor.assertIsolated()
            received.append(Int(String(decoding: line, as: UTF8.self)) ?? -1)
            if next < 1_000 {
                try await socket.send(command: Numbered(message: "\(next)"))
                next += 1
            }
            if received.count == 1_000 { break }
        }
        #expect(received == Array(0..<1_000))
        await socket.close()
        await server.shutdown()
    }

    @Test(.timeLimit(.minutes(1)))
    func cancellingAWaitingConsumerClosesWithGoingAway() async throws {
        let server = CloseHandshakeTests.server()
        let (codes, codeSink) = AsyncStream.makeStream(of: WebSocketCloseCode?.self)
        server.route("/silent") { c in
            try? await c.send(text: "first\n")
            while (try? await c.receive()) != nil {}
            codeSink.yield(c.closeStatus?.code)
        }
        let port = try await server.start()
        let socket = SocketAdapter()
        let lines = try await socket.connectLines(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/silent"))
        let (firsts, firstSink) = AsyncStream.makeStream(of: Void.self)
        let consumer = Task {
            var count = 0
            for await _ in lines {
                count += 1
                firstSink.yield()
            }
            return count
        }
        // After the first line nothing else comes: the consumer waits for the next batch.
        var firstIterator = firsts.makeAsyncIterator()
        _ = await firstIterator.next()
        consumer.cancel()
        #expect(await consumer.value == 1)
        var iterator = codes.makeAsyncIterator()
        #expect(await iterator.next() == .some(.goingAway))
        await server.shutdown()
    }

    @Test(.timeLimit(.minutes(1)))
    func linesSentBeforeTheServersCloseReachALateSequenceConsumer() async throws {
        let server = CloseHandshakeTests.server()
        server.route("/last-words") { c in
            try? await c.send(text: "one\ntwo\n")
            await c.close(code: .normalClosure, reason: "done")
        }
        let port = try await server.start()
        let socket = SocketAdapter()
        let lines = try await socket.connectLines(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/last-words"))
        #expect(await serverEventually { await socket.currentConnection == nil })
        var received: [String] = []
        for await line in lines { received.append(String(decoding: line, as: UTF8.self)) }
        #expect(received == ["one", "two"])
        await server.shutdown()
    }
}
