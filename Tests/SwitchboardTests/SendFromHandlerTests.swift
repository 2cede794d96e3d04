import Foundation
import Testing
import SwitchboardCore
@testable import Switchboard

/// `send(text:)`, `send(binary:)` and `send(_:)` take a synchronous path when their caller is
/// already isolated to the connection (a route handler) and the queue has room, and the
/// connection's own path from anywhere else or when they must wait or fail: both keep the
/// order of the sends and the same errors.
@Suite("Sending from the route handler and from other tasks")
struct SendFromHandlerTests {
    static func server() -> WebSocketServer { CloseHandshakeTests.server() }

    @Test(.timeLimit(.minutes(1)))
    func sendsFromTheHandlerAndFromOtherTasksArriveInOrder() async throws {
        let server = Self.server()
        server.route("/") { c in
            try await c.send(text: "1")                        // the handler's own isolation
            try await c.send(binary: Data([2]))
            try await c.send(.text(Array("3".utf8)))
            try await Task { try await c.send(text: "4") }.value            // another task
            try await Task.detached { try await c.send(binary: Data([5])) }.value
            try await Task.detached { try await c.send(.binary([6])) }.value
            try await c.send(text: "7")
            for await _ in c.messages() {}
        }
        let port = try await server.start()
        let socket = SocketAdapter()
        let messages = try await socket.connectMessages(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/",
                                                                                     configuration: CloseHandshakeTests.patient))
        var received: [WebSocketMessage] = []
        for await m in messages {
            received.append(m)
            if received.count == 7 { break }
        }
        #expect(received == [.text(Array("1".utf8)), .binary([2]), .text(Array("3".utf8)), .text(Array("4".utf8)),
                             .binary([5]), .binary([6]), .text(Array("7".utf8))])
        await socket.close()
        await server.shutdown()
    }

    @Test(.timeLimit(.minutes(1)))
    func aSendAfterTheCloseThrowsClosedOnEveryPath() async throws {
        let server = Self.server()
        let (outcomes, outcome) = AsyncStream<[SwitchboardError.Kind?]>.makeStream()
        server.route("/") { c in
            for await _ in c.messages() {}                   // until the client's close
            var kinds: [SwitchboardError.Kind?] = []
            do throws(SwitchboardError) { try await c.send(text: "late"); kinds.append(nil) } catch { kinds.append(error.kind) }
            do throws(SwitchboardError) { try await c.send(binary: Data([1])); kinds.append(nil) } catch { kinds.append(error.kind) }
            do throws(SwitchboardError) { try await c.send(.text([0x61])); kinds.append(nil) } catch { kinds.append(error.kind) }
            kinds.append(await Task.detached { () async -> SwitchboardError.Kind? in
                do throws(SwitchboardError) { try await c.send(text: "late"); return nil } catch { return error.kind }
            }.value)
            outcome.yield(kinds)
        }
        let port = try await server.start()
        let socket = SocketAdapter()
        _ = try await socket.connectMessages(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/",
                                                                          configuration: CloseHandshakeTests.patient))
        await socket.close()
        var iterator = outcomes.makeAsyncIterator()
        let kinds = await iterator.next()
        #expect(kinds == [.closed, .closed, .closed, .closed])
        await server.shutdown()
    }
}

/// `messages()` in a route handler's own task waits without a cancellation handler (nothing can
/// cancel that task while it waits); every other task keeps one. Both end their sequence and
/// close with 1001 when their task is cancelled.
@Suite("Receiving in the route handler's task and in other tasks")
struct ReceiveInHandlerTaskTests {
    /// The handler's task shares one field with a callback route's callbacks, a pointer and a
    /// tag byte (which the `Bool` declared after it shares a word with): a connection of either
    /// kind is no larger for it.
    @Test func theHandlersTaskAndTheCallbacksShareOneField() {
        #expect(MemoryLayout<WebSocketConnection.Consumer>.size <= MemoryLayout<Int>.size + 1)
    }

    @Test(.timeLimit(.minutes(1)))
    func cancellingAnotherTaskWaitingForMessagesEndsItAndClosesWithGoingAway() async throws {
        let server = SendFromHandlerTests.server()
        let (counts, count) = AsyncStream<Int>.makeStream()
        server.route("/") { c in
            let (taken, tookOne) = AsyncStream<Void>.makeStream()
            let receiver = Task {                      // another task, isolated to the connection
                var n = 0
                for await _ in c.messages() { n += 1; tookOne.yield() }
                count.yield(n)
            }
            for await _ in taken { break }             // it took the first message...
            while !c.hasWaitingReceiver { try? await Task.sleep(for: .milliseconds(2)) }   // ...and waits again
            receiver.cancel()
            await receiver.value
        }
        let port = try await server.start()
        let socket = SocketAdapter()
        _ = try await socket.connectMessages(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/",
                                                                          configuration: CloseHandshakeTests.patient))
        try await socket.send(text: "one")
        var iterator = counts.makeAsyncIterator()
        #expect(await iterator.next() == 1)
        #expect(await serverEventually { await socket.closeStatus?.code == .goingAway })
        await server.shutdown()
    }

    @Test(.timeLimit(.minutes(1)))
    func aHandlerThatCancelledItselfSeesTheEndAndClosesWithGoingAway() async throws {
        let server = SendFromHandlerTests.server()
        let (counts, count) = AsyncStream<Int>.makeStream()
        server.route("/") { c in
            var n = 0
            for await _ in c.messages() {
                n += 1
                withUnsafeCurrentTask { $0?.cancel() }    // after the first message
            }
            count.yield(n)
        }
        let port = try await server.start()
        let socket = SocketAdapter()
        _ = try await socket.connectMessages(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/",
                                                                          configuration: CloseHandshakeTests.patient))
        try await socket.send(text: "first")
        var iterator = counts.makeAsyncIterator()
        #expect(await iterator.next() == 1)
        #expect(await serverEventually { await socket.closeStatus?.code == .goingAway })
        await server.shutdown()
    }

    @Test(.timeLimit(.minutes(1)))
    func theHandlersOwnTaskReceivesEveryMessageInOrderUntilTheClose() async throws {
        let server = SendFromHandlerTests.server()
        let (results, result) = AsyncStream<[String]>.makeStream()
        server.route("/") { c in
            var texts: [String] = []
            for await m in c.messages() { if case .text(let b) = m { texts.append(String(decoding: b, as: UTF8.self)) } }
            result.yield(texts)
        }
        let port = try await server.start()
        let socket = SocketAdapter()
        _ = try await socket.connectMessages(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/",
                                                                          configuration: CloseHandshakeTests.patient))
        for i in 0..<50 { try await socket.send(text: "m\(i)") }
        await socket.close()
        var iterator = results.makeAsyncIterator()
        #expect(await iterator.next() == (0..<50).map { "m\($0)" })
        await server.shutdown()
    }
}
