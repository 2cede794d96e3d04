#if MetricsSupport
import Foundation
import Metrics
import MetricsTestKit
import Testing
@testable import Switchboard
import SwitchboardCore

/// The server's swift-metrics after a scripted session, through an in-memory backend given to
/// this server only (nothing is bootstrapped globally).
@Suite struct ServerMetricsTests {
    @Test func countsAScriptedSession() async throws {
        let metrics = TestMetrics()
        var configuration = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.connection.pingInterval = .milliseconds(50)
        configuration.connection.inboundHighWaterMark = 4 << 10
        configuration.connection.inboundLowWaterMark = 1 << 10
        let server = WebSocketServer(configuration: configuration, metricsFactory: metrics)
        server.route("/echo") { connection in
            for await message in connection.messages() { try await connection.send(message) }
        }
        server.route("/auth", authenticate: { _ in .unauthorized() }) { _ in }
        let (gate, opening) = AsyncStream<Void>.makeStream()
        server.route("/stall") { connection in
            for await _ in gate { break }  // reads nothing until the test opens the gate
            for await _ in connection.messages() {}
        }
        let port = try await server.start()
        func endpoint(_ path: String) throws -> WebSocketURLEndpoint {
            try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)\(path)")
        }

        // Echo three lines (2, 3 and 4 bytes), then close with 1000.
        let a = SocketAdapter()
        let aLines = try await a.connect(to: endpoint("/echo"))
        for line in ["a", "bb", "ccc"] { try await a.send(text: line + "\n") }
        var echoed: [String] = []
        for await line in aLines {
            echoed.append(String(decoding: line, as: UTF8.self))
            if echoed.count == 3 { break }
        }
        #expect(echoed == ["a", "bb", "ccc"])
        // Keepalive pings are answered by the client: a round-trip time is recorded.
        #expect(await serverEventually { ((try? metrics.expectTimer("switchboard_ping_round_trip"))?.values.count ?? 0) >= 1 })
        await a.close(code: .normalClosure)

        // Refused upgrades: no route (404) and a hook that says no (401).
        await #expect(throws: SwitchboardError.self) { _ = try await SocketAdapter().connect(to: endpoint("/none")) }
        await #expect(throws: SwitchboardError.self) { _ = try await SocketAdapter().connect(to: endpoint("/auth")) }

        // A connection whose handler does not read: the server stops reading from it.
        let stalled = SocketAdapter()
        _ = try await stalled.connect(to: endpoint("/stall"))
        let kilobyte = String(repeating: "x", count: 1023) + "\n"
        for _ in 0..<16 { try await stalled.send(text: kilobyte) }
        #expect(await serverEventually { metrics.counterTotal(label: "switchboard_backpressure_pauses_total") >= 1 })
        opening.yield()
        opening.finish()
        // An application close code.
        await stalled.close(code: WebSocketCloseCode(rawValue: 4001), reason: "done")

        #expect(await serverEventually { server.statistics.openConnections == 0 })
        #expect(try metrics.expectCounter("switchboard_connections_accepted_total").totalValue == 2)
        #expect(try metrics.expectMeter("switchboard_connections_open").lastValue == 0)
        #expect(try metrics.expectCounter("switchboard_messages_total", [("direction", "in")]).totalValue == 3 + 16)
        #expect(try metrics.expectCounter("switchboard_messages_total", [("direction", "out")]).totalValue == 3)
        #expect(try metrics.expectCounter("switchboard_message_bytes_total", [("direction", "in")]).totalValue == 9 + 16 * 1024)
        #expect(try metrics.expectCounter("switchboard_message_bytes_total", [("direction", "out")]).totalValue == 9)
        #expect(try metrics.expectCounter("switchboard_connections_rejected_total", [("reason", "not_found")]).totalValue == 1)
        #expect(try metrics.expectCounter("switchboard_connections_rejected_total", [("reason", "authentication")]).totalValue == 1)
        #expect(try metrics.expectCounter("switchboard_handshake_failures_total", [("status", "404")]).totalValue == 1)
        #expect(try metrics.expectCounter("switchboard_handshake_failures_total", [("status", "401")]).totalValue == 1)
        #expect(try metrics.expectCounter("switchboard_closes_total", [("code", "1000")]).totalValue == 1)
        #expect(try metrics.expectCounter("switchboard_closes_total", [("code", "4xxx")]).totalValue == 1)
        #expect(metrics.counterTotal(label: "switchboard_slow_consumer_closes_total") == 0)
        // Labels stay bounded: nothing per connection or per path.
        for counter in metrics.counters {
            for (name, _) in counter.dimensions {
                #expect(["direction", "reason", "status", "code"].contains(name), "unexpected label \(name)")
            }
        }
        await server.shutdown()
    }

    @Test func closeCodeAndStatusLabelsAreBounded() {
        #expect(ServerMetrics.codeLabel(.normalClosure) == "1000")
        #expect(ServerMetrics.codeLabel(WebSocketCloseCode(rawValue: 3042)) == "3xxx")
        #expect(ServerMetrics.codeLabel(WebSocketCloseCode(rawValue: 4999)) == "4xxx")
        #expect(ServerMetrics.codeLabel(WebSocketCloseCode(rawValue: 2999)) == "other")
        #expect(ServerMetrics.statusLabel(404) == "404")
        #expect(ServerMetrics.statusLabel(418) == "4xx")
        #expect(ServerMetrics.statusLabel(599) == "5xx")
        #expect(ServerMetrics.statusLabel(99) == "other")
    }
}
#endif
