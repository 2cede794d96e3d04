import Foundation
import Testing
import Switchboard
import SwitchboardCore
import SwitchboardTestSupport

/// `GET /metrics` on the built `agent-stream` (MetricsSupport trait): parsed by PyPI's
/// prometheus_client after a scripted session of turns, counters equal to the session's;
/// `--api-key-file` protects it. Serialized: it runs a server.
@Suite("agent-stream /metrics", .serialized, .timeLimit(.minutes(5)))
struct AgentMetricsEndpointTests {
    /// The chat-room tests' scraper (one script for both examples): prints the samples as JSON.
    static let scraper = AgentServerProcess.packageRoot.appendingPathComponent("Tests/ChatRoomTests/Peers/metrics_scrape.py")

    /// Status and samples (`name{label=value,…}` → value) of `url`, parsed by prometheus_client.
    static func scrape(_ url: String, key: String?) async throws -> (status: Int, samples: [String: Double]) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", scraper.path, url] + (key.map { [$0] } ?? [])
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        // Read to the end first (a full pipe would block the child), then reap it.
        let data = try await Task.detached { try out.fileHandleForReading.readToEnd() ?? Data() }.value
        let errors = try await Task.detached { try err.fileHandleForReading.readToEnd() ?? Data() }.value
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw TestFailure("metrics_scrape.py failed: \(String(decoding: errors, as: UTF8.self))")
        }
        struct Scrape: Decodable { var status: Int; var samples: [String: Double] }
        let scrape = try JSONDecoder().decode(Scrape.self, from: data)
        return (scrape.status, scrape.samples)
    }

    @Test func countersMatchAScriptedSessionAndTheKeyProtectsThem() async throws {
        let dir = try TestTemporaryDirectory.make(prefix: "agent-metrics")
        let key = "metrics-key-" + UUID().uuidString
        let keyFile = dir.appendingPathComponent("api.key")
        try Data((key + "\n").utf8).write(to: keyFile)
        let server = try await AgentServerProcess(["--api-key-file", keyFile.path, "--word-delay-ms", "1"])
        defer { server.stop() }
        let url = "http://127.0.0.1:\(server.port)/metrics"

        // Three sessions, one turn each: a message, the permission it asks for, the result.
        let sessions = 3
        var received = 0
        var clients: [RawAgentClient] = []
        for _ in 0..<sessions {
            let client = try await RawAgentClient.connect(port: server.port, session: UUID().uuidString, token: nil)
            try await client.send(#"{"type":"message","data":{"content":"count me"}}"#)
            let asked = await client.read { $0["type"] as? String == "permission_request" }
            #expect(asked.last?["type"] as? String == "permission_request", "\(asked)")
            try await client.send(#"{"type":"permission","data":{"tool_use_id":"toolu_1_1","decision":"allow_once"}}"#)
            let rest = await client.read { $0["type"] as? String == "result" }
            #expect(rest.last?["type"] as? String == "result", "\(rest)")
            received += asked.count + rest.count
            clients.append(client)
        }

        #expect(try await Self.scrape(url, key: nil).status == 401)
        #expect(try await Self.scrape(url, key: key + "x").status == 401)
        let (status, samples) = try await Self.scrape(url, key: key)
        #expect(status == 200)
        #expect(samples["switchboard_connections_accepted_total{}"] == Double(sessions), "\(samples)")
        #expect(samples["switchboard_connections_open{}"] == Double(sessions), "\(samples)")
        #expect(samples["switchboard_messages_total{direction=in}"] == Double(2 * sessions), "\(samples)")
        #expect(samples["switchboard_messages_total{direction=out}"] == Double(received), "\(samples)")
        for client in clients { await client.close() }
    }
}
