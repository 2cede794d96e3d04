import Foundation
import Testing
@testable import Switchboard
import SwitchboardCore
import SwitchboardTestSupport

/// `SocketAdapter.connect(resolving:)`: the endpoint is made anew before every attempt, so a
/// reconnection can carry a resume position in its query.
@Suite struct ResolvingEndpointTests {
    struct Endpoint: SocketEndpoint {
        var port: Int
        var position: Int
        var scheme: SocketScheme { .ws }
        var host: String { "127.0.0.1" }
        var queryItems: [(name: String, value: String)] { [("last_seq", String(position))] }
    }

    @Test(.timeLimit(.minutes(2)))
    func everyReconnectionAsksForTheEndpointAgain() async throws {
        let server = WebSocketServer(configuration: .init(host: "127.0.0.1", port: 0))
        server.route("/") { c in
            // Tells the client the query it connected with.
            let seen = c.request?.head.queryItems.first { $0.name == "last_seq" }?.value ?? "none"
            try? await c.send(text: "connected with last_seq=\(seen)\n")
            for await _ in c.lines() {}
        }
        let port = try await server.start()
        let relay = try TCPRelay(targetPort: port)
        defer { relay.stop() }
        let seen = Locked(0)
        let adapter = SocketAdapter(reconnect: ReconnectPolicy(baseDelay: .milliseconds(10), maxDelay: .milliseconds(50)))
        let lines = try await adapter.connect(resolving: {
            Endpoint(port: relay.port, position: seen.withLock { $0 })
        })
        var received: [String] = []
        for await line in lines {
            let text = String(decoding: line, as: UTF8.self)
            received.append(text)
            // The application's resume position moves on; the next connection must carry it.
            seen.withLock { $0 += 10 }
            if received.count == 3 { break }
            #expect(relay.cutAll() == 1)
        }
        #expect(received == ["connected with last_seq=0", "connected with last_seq=10", "connected with last_seq=20"])
        await adapter.close()
        await server.shutdown()
    }

    @Test(.timeLimit(.minutes(2)))
    func anEndpointErrorEndsTheFirstConnect() async throws {
        let adapter = SocketAdapter()
        await #expect(throws: SwitchboardError.self) {
            _ = try await adapter.connect(resolving: { () async throws(SwitchboardError) -> any SocketEndpoint in
                throw .invalidArgument("no session yet")
            })
        }
        #expect(await adapter.lastError?.description.contains("no session yet") == true)
    }
}
