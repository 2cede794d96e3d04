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
    static func server() -> WebSocketServer {
        var config = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        config.connection = CloseHandshakeTests.patient
        config.loopCount = 1
        return WebSocketServer(configuration: config)
    }

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
