import Foundation
import Switchboard
import SwitchboardCore
import Testing

/// What a server sends just before it closes reaches a consumer that starts reading only after
/// the close completed (the connection's close reply waits 1 s for a reader, then goes): the
/// adapter should drain the ended connection before it ends the stream.
@Suite struct AdapterDrainTests {
    @Test(.timeLimit(.minutes(1)))
    func linesSentBeforeTheServersCloseReachALateConsumer() async throws {
        let server = CloseHandshakeTests.server()
        server.route("/last-words") { c in
            try? await c.send(text: "one\ntwo\n")
            await c.close(code: .normalClosure, reason: "done")
        }
        let port = try await server.start()
        let socket = SocketAdapter()
        let lines = try await socket.connect(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/last-words"))
        // Read nothing until the adapter has let the connection go: the connection's close reply
        // waited its grace (1 s) for a reader, then the handshake completed and the adapter's
        // connection ended.
        #expect(await serverEventually { await socket.currentConnection == nil })
        var received: [String] = []
        for await line in lines { received.append(String(decoding: line, as: UTF8.self)) }
        #expect(received == ["one", "two"])
        await server.shutdown()
    }

    @Test(.timeLimit(.minutes(1)))
    func aMessageSentBeforeTheServersCloseReachesALateConsumer() async throws {
        let server = CloseHandshakeTests.server()
        server.route("/last-message") { c in
            try? await c.send(text: "bye")
            await c.close(code: .normalClosure, reason: "done")
        }
        let port = try await server.start()
        let socket = SocketAdapter()
        let messages = try await socket.connectMessages(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/last-message"))
        #expect(await serverEventually { await socket.currentConnection == nil })
        var received: [String] = []
        for await message in messages { received.append(message.text ?? "?") }
        #expect(received == ["bye"])
        await server.shutdown()
    }
}
