import Foundation
import Synchronization
import Testing
@testable import Switchboard
import SwitchboardCore

extension ServerInterop {
@Suite struct WebSocketServerShutdownTests {
    /// After `shutdown()` the server's event loops have stopped, and they are the executors of the
    /// connection actors: an `await` on a connection must still return. (Regression: a stopped
    /// loop used to drop every job enqueued after its thread exited; now such jobs run on the
    /// loop's fallback queue.)
    @Test func awaitingAConnectionAfterShutdownReturns() async throws {
        let held = Locked<[WebSocketConnection]>([])
        let server = WebSocketServer(configuration: .init(host: "127.0.0.1", port: 0))
        server.route("/hold") { c in
            held.withLock { $0.append(c) }
            for await _ in c.messages() {}
        }
        let port = try await server.start()
        // Two connections: one on each of the two loops.
        let clients = try await onServerTestThread { () -> UncheckedBox<[ServerRawSocket]> in
            let sockets = try (0..<2).map { _ in try ServerRawSocket(port: port) }
            for s in sockets { try s.handshake(path: "/hold") }
            return UncheckedBox(sockets)
        }
        #expect(await serverEventually { held.withLock { $0.count } == 2 })
        // The clients answer the server's 1001 so that shutdown completes its handshakes.
        let answer = Task {
            try await onServerTestThread { () -> [Int?] in
                try clients.value.map { s in
                    let close = try s.readUntilCloseFrame()
                    try s.send(ServerRawSocket.closeFrame(code: 1000))
                    _ = s.readsEOF()
                    return close.closeCode
                }
            }
        }
        await server.shutdown(timeout: .seconds(60))                // returns once both are closed
        #expect(try await answer.value == [1001, 1001])

        // shutdown() returns once it has *asked* the loops to stop; give them time to do so (only
        // makes the check below meaningful more often: if they are still up, it passes anyway).
        try await Task.sleep(for: .milliseconds(200))
        let flags = held.withLock { $0 }.map { connection in
            let answered = TestFlag()
            Task {
                // The first job after shutdown() wakes the stopped loop, which runs it and exits;
                // every later one is queued on a loop that is gone.
                _ = await connection.closeStatus
                _ = await connection.closeStatus
                answered.set()
            }
            return answered
        }
        // A dropped job never runs: a generous wait tells that apart from a slow one.
        let returned = await serverEventually(timeout: .seconds(60)) { flags.allSatisfy(\.isSet) }
        #expect(returned, "await connection.closeStatus did not return within 60 s after shutdown()")
    }
}
}
