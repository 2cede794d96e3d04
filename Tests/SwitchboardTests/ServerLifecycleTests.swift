import Foundation
import Logging
import Testing
@testable import Switchboard
import SwitchboardCore
#if ServiceLifecycleSupport
import ServiceLifecycle
#endif

/// `run()`, `listeningPort`, graceful shutdown (by cancellation and from a `ServiceGroup`),
/// handlers that throw, and a server on a shared `EventLoopGroup`.
@Suite struct ServerLifecycleTests {
    /// Connects a client to `path` and returns it with its line stream.
    private func connect(port: Int, path: String, group: EventLoopGroup? = nil) async throws
        -> (SocketAdapter, AsyncStream<Data>) {
        let client = SocketAdapter(group: group)
        let lines = try await client.connect(to: WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)\(path)"))
        return (client, lines)
    }

    /// Reads `lines` to its end and returns the close code the client saw.
    private func closeCode(after lines: AsyncStream<Data>, of client: SocketAdapter) async -> UInt16? {
        var iterator = lines.makeAsyncIterator()
        return await closeCode(draining: &iterator, of: client)
    }

    private func closeCode(draining iterator: inout AsyncStream<Data>.Iterator, of client: SocketAdapter) async -> UInt16? {
        while await iterator.next() != nil {}
        return await client.closeStatus?.code.rawValue
    }

    private func echoServer(_ configure: (inout WebSocketServerConfiguration) -> Void = { _ in },
                            group: EventLoopGroup? = nil) -> WebSocketServer {
        var configuration = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.shutdownTimeout = .seconds(30)
        configure(&configuration)
        let server = WebSocketServer(configuration: configuration, group: group)
        server.route("/echo") { connection in
            for await message in connection.messages() { try await connection.send(message) }
        }
        return server
    }

    @Test func runServesUntilCancelledThenClosesEveryConnectionWith1001() async throws {
        let server = echoServer()
        let running = Task { try await server.run() }
        let port = try await server.listeningPort
        #expect(port > 0)
        let (a, aLines) = try await connect(port: port, path: "/echo")
        let (b, bLines) = try await connect(port: port, path: "/echo")
        try await a.send(text: "ping\n")
        var iterator = aLines.makeAsyncIterator()
        #expect(await iterator.next() == Data("ping".utf8))

        running.cancel()
        try await running.value  // returns: run() is done, not just asked
        #expect(await closeCode(draining: &iterator, of: a) == 1001)
        #expect(await closeCode(after: bLines, of: b) == 1001)
        #expect(server.statistics.openConnections == 0)
    }

    @Test func listeningPortFailsWhenTheServerCannotStart() async throws {
        // Take a port, then ask a second server for it.
        let first = echoServer()
        let taken = try await first.start()
        let second = echoServer { $0.port = taken }
        let running = Task { try await second.run() }
        await #expect(throws: SwitchboardError.self) { _ = try await second.listeningPort }
        await #expect(throws: SwitchboardError.self) { try await running.value }
        await first.shutdown()
    }

    @Test func aThrowingHandlerOrCallbackClosesWith1011AndCancellationWith1001() async throws {
        struct Boom: Error {}
        let server = echoServer()
        server.route("/throws") { connection in
            for await _ in connection.messages() { throw Boom() }
        }
        server.route("/cancelled") { connection in
            for await _ in connection.messages() { throw CancellationError() }
        }
        server.route("/callback-throws", callbacks: WebSocketCallbacks(onMessage: { _, _ in throw Boom() }))
        let port = try await server.start()
        let (a, aLines) = try await connect(port: port, path: "/throws")
        try await a.send(text: "x\n")
        #expect(await closeCode(after: aLines, of: a) == 1011)
        let (b, bLines) = try await connect(port: port, path: "/cancelled")
        try await b.send(text: "x\n")
        #expect(await closeCode(after: bLines, of: b) == 1001)
        let (c, cLines) = try await connect(port: port, path: "/callback-throws")
        try await c.send(text: "x\n")
        #expect(await closeCode(after: cLines, of: c) == 1011)
        await server.shutdown()
    }

    @Test func aServerOnASharedGroupLeavesTheGroupRunning() async throws {
        let group = try EventLoopGroup(loopCount: 1, name: "shared-test")
        defer { group.shutdown() }
        let server = echoServer(group: group)
        let port = try await server.start()
        // A client on the same loops.
        let (client, lines) = try await connect(port: port, path: "/echo", group: group)
        try await client.send(text: "one\n")
        var iterator = lines.makeAsyncIterator()
        #expect(await iterator.next() == Data("one".utf8))
        await server.shutdown()
        #expect(await closeCode(draining: &iterator, of: client) == 1001)

        // The group still runs work after the server has stopped: a second server on it serves.
        let again = echoServer(group: group)
        let port2 = try await again.start()
        let (client2, lines2) = try await connect(port: port2, path: "/echo", group: group)
        try await client2.send(text: "two\n")
        var iterator2 = lines2.makeAsyncIterator()
        #expect(await iterator2.next() == Data("two".utf8))
        await client2.close()
        await again.shutdown()
    }

    /// The wait for handlers is bounded: a handler that does not return holds shutdown for
    /// `timeout` only, and its connection is closed regardless.
    @Test func shutdownWaitsForAStuckHandlerOnlyUntilTheTimeout() async throws {
        let server = echoServer()
        let (gate, opening) = AsyncStream<Void>.makeStream()
        let finished = TestFlag()
        server.route("/stuck") { _ in
            for await _ in gate { break }  // ignores its connection until the test opens the gate
            finished.set()
        }
        let port = try await server.start()
        let (client, lines) = try await connect(port: port, path: "/stuck")
        await server.shutdown(timeout: .seconds(2))
        #expect(!finished.isSet)                       // returned while the handler still runs
        #expect(await closeCode(after: lines, of: client) == 1001)
        #expect(server.statistics.openConnections == 0)
        opening.yield()
        opening.finish()
        #expect(await serverEventually { finished.isSet })
    }

    @Test func aServerRunsOnce() async throws {
        let server = echoServer()
        try await server.start()
        let again = await #expect(throws: SwitchboardError.self) { try await server.start() }
        #expect(again?.kind == .invalidArgument)
        await server.shutdown()
        let afterShutdown = await #expect(throws: SwitchboardError.self) { try await server.run() }
        #expect(afterShutdown?.kind == .cancelled)

        // Shut down before it ever started: run() refuses instead of listening forever.
        let never = echoServer()
        await never.shutdown()
        let refused = await #expect(throws: SwitchboardError.self) { try await never.run() }
        #expect(refused?.kind == .cancelled)
        await #expect(throws: (any Error).self) { _ = try await never.listeningPort }
    }

    #if ServiceLifecycleSupport
    /// A `ServiceGroup` shutting down gracefully (as on SIGTERM) stops the server: every client
    /// gets 1001 and the group's `run()` returns.
    @Test func gracefulShutdownOfAServiceGroupClosesEveryConnectionWith1001() async throws {
        let server = echoServer()
        var logger = Logger(label: "test.lifecycle")
        logger.logLevel = .critical
        let group = ServiceGroup(configuration: .init(services: [server], logger: logger))
        let running = Task { try await group.run() }
        let port = try await server.listeningPort
        var clients: [(SocketAdapter, AsyncStream<Data>)] = []
        for _ in 0..<3 { clients.append(try await connect(port: port, path: "/echo")) }
        for (client, _) in clients { try await client.send(text: "hello\n") }
        #expect(await serverEventually { server.statistics.messagesIn == 3 })

        await group.triggerGracefulShutdown()
        try await running.value
        for (client, lines) in clients {
            #expect(await closeCode(after: lines, of: client) == 1001)
        }
        // Stopped: new connections are refused.
        await #expect(throws: SwitchboardError.self) { _ = try await connect(port: port, path: "/echo") }
    }
    #endif
}

/// A flag set from one task and read from another.
final class TestFlag: Sendable {
    private let value = Locked(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
}
