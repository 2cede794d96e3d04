import Foundation
import Synchronization
import Testing
import SwitchboardCore
@testable import Switchboard

/// A connection reuses the storage of a large received message for the next one once the
/// application has let go of it (`WebSocketProtocol.recycle`). Messages the application still
/// holds must never change, in either role and either handler style.
@Suite("Receive storage reuse")
struct ReceiveStorageReuseTests {
    static let count = 8
    static let size = 64 << 10

    /// Distinct content per message, so a message overwritten by a later one is caught.
    static func payload(_ index: Int) -> [UInt8] {
        (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ index &* 131) }
    }

    static func client(port: Int, path: String) async throws -> (SocketAdapter, AsyncStream<WebSocketMessage>, WebSocketConnection) {
        let socket = SocketAdapter()
        let messages = try await socket.connectMessages(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)\(path)"))
        let connection = try #require(await socket.currentConnection)
        return (socket, messages, connection)
    }

    /// Sends every payload, then reads all answers and only then compares them (the client
    /// holds every received message until the end, too).
    static func sendAllThenCheckEveryAnswer(port: Int, path: String) async throws {
        let (socket, messages, connection) = try await client(port: port, path: path)
        for i in 0..<count { try await connection.send(.binary(payload(i))) }
        var received: [WebSocketMessage] = []
        for await message in messages {
            received.append(message)
            if received.count == count { break }
        }
        #expect(received.count == count)
        for (i, message) in received.enumerated() {
            #expect(message == .binary(payload(i)), "message \(i) changed after it was delivered")
        }
        await socket.close()
    }

    /// One message at a time, each checked as it comes back: storage is reused all along.
    static func echoOneAtATime(port: Int, path: String) async throws {
        let (socket, messages, connection) = try await client(port: port, path: path)
        var iterator = messages.makeAsyncIterator()
        for i in 0..<(2 * count) {
            try await connection.send(.binary(payload(i)))
            let answer = await iterator.next()
            #expect(answer == .binary(payload(i)), "echo \(i) differs")
        }
        await socket.close()
    }

    @Test func aTaskThatHoldsEveryMessageSeesEachUnchanged() async throws {
        try await withTestServer(setup: { server in
            server.route("/hold") { c in
                var held: [WebSocketMessage] = []
                for await m in c.messages() {
                    held.append(m)
                    if held.count == Self.count { break }
                }
                for m in held { try? await c.send(m) }
                for await _ in c.messages() {}
            }
            server.route("/echo", handler: echoHandler)
        }) { _, port in
            try await Self.sendAllThenCheckEveryAnswer(port: port, path: "/hold")
            try await Self.echoOneAtATime(port: port, path: "/echo")
        }
    }

    @Test func callbacksThatHoldEveryMessageSeeEachUnchanged() async throws {
        let held = Mutex<[WebSocketMessage]>([])
        let hold = WebSocketCallbacks(onMessage: { connection, message in
            let all: [WebSocketMessage]? = held.withLock {
                $0.append(message)
                return $0.count == Self.count ? $0 : nil
            }
            for m in all ?? [] { _ = try? connection.sendNow(m) }
        })
        let echo = WebSocketCallbacks(onMessage: { connection, message in _ = try? connection.sendNow(message) })
        try await withTestServer(setup: { server in
            server.route("/hold", callbacks: hold)
            server.route("/echo", callbacks: echo)
        }) { _, port in
            try await Self.sendAllThenCheckEveryAnswer(port: port, path: "/hold")
            try await Self.echoOneAtATime(port: port, path: "/echo")
        }
    }
}
