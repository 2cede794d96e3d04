import Foundation
import Testing
@testable import Switchboard

/// The event-loop backend choice (``EventLoopBackend``) and the io_uring backend end to end:
/// a server and a client on io_uring loops exchange lines, large messages and a close.
@Suite("Event-loop backends")
struct EventLoopBackendTests {
    @Test func automaticReadsTheEnvironmentAndExplicitChoicesIgnoreIt() throws {
        #expect(try EventLoopBackend.automatic.resolved(environment: nil) == .epoll)
        #expect(try EventLoopBackend.automatic.resolved(environment: "") == .epoll)
        #expect(try EventLoopBackend.automatic.resolved(environment: "EPOLL") == .epoll)
        #expect(try EventLoopBackend.epoll.resolved(environment: "io_uring") == .epoll)
        #expect(throws: SocketError.self) { try EventLoopBackend.automatic.resolved(environment: "kqueue") }
        if EventLoopBackend.isIOUringAvailable {
            #expect(try EventLoopBackend.automatic.resolved(environment: "io_uring") == .ioUring)
            #expect(try EventLoopBackend.ioUring.resolved(environment: "epoll") == .ioUring)
        } else {
            #expect(throws: SocketError.self) { try EventLoopBackend.ioUring.resolved(environment: nil) }
        }
    }

    @Test func aGroupReportsTheBackendItRuns() throws {
        let group = try EventLoopGroup(loopCount: 1, name: "backend-epoll", backend: .epoll)
        defer { group.shutdown() }
        #expect(group.backend == .epoll)
        #expect(group.loops.allSatisfy { $0.backend == .epoll })
    }

    @Test(.enabled(if: EventLoopBackend.isIOUringAvailable, "io_uring unavailable here"))
    func serverAndClientOnIOUringExchangeLinesLargeMessagesAndAClose() async throws {
        let group = try EventLoopGroup(loopCount: 2, name: "backend-uring", backend: .ioUring)
        defer { group.shutdown() }
        #expect(group.loops.allSatisfy { $0.backend == .ioUring })
        var configuration = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.shutdownTimeout = .seconds(30)
        let server = WebSocketServer(configuration: configuration, group: group)
        server.route("/echo") { connection in
            for await message in connection.messages() { try await connection.send(message) }
        }
        let port = try await server.start()
        let client = SocketAdapter(group: group)
        let lines = try await client.connect(to: WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/echo"))
        var iterator = lines.makeAsyncIterator()
        // Small lines, then lines larger than one provided buffer (16 KiB), then a burst of
        // lines (6 × 900 KB in flight, more than the loop's whole buffer ring, 1 or 4 MiB):
        // each arrives whole and in order.
        func line(_ i: Int, _ size: Int) -> String {
            String(repeating: Character(UnicodeScalar(UInt8(97 + i % 26))), count: size)
        }
        for (i, size) in [1, 100, 16 * 1024 + 3, 300_000, 7].enumerated() {
            try await client.send(text: line(i, size) + "\n")
            #expect(await iterator.next() == Data(line(i, size).utf8))
        }
        for i in 0..<6 { try await client.send(text: line(i, 900_000) + "\n") }
        for i in 0..<6 {
            let echoed = await iterator.next()
            #expect(echoed?.count == 900_000)
            #expect(echoed == Data(line(i, 900_000).utf8))
        }
        await server.shutdown()
        while await iterator.next() != nil {}
        #expect(server.statistics.openConnections == 0)
    }
}
