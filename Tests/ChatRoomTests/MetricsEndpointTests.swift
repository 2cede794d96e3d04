import Foundation
import Switchboard
import SwitchboardCore
import ChatRoomCore
import Testing

/// `GET /metrics` on the built `chat-room` (MetricsSupport trait): the Prometheus text format,
/// parsed by PyPI's prometheus_client, with counters that match a scripted session; protected
/// by `--api-key-file` when given, open otherwise. Serialized: each test runs a server.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct MetricsEndpointTests {
    /// `connections` clients join one room and send `messagesEach` messages each; returns the
    /// number of lines the server sent them (every event), once every client has every message.
    static func scriptedSession(_ server: ChatServerProcess, connections: Int, messagesEach: Int) async throws -> (peers: [TestPeer], sent: Int) {
        var peers: [TestPeer] = []
        for i in 0..<connections {
            let peer = try await TestPeer.connect("u\(i)", url: server.wsURL)
            try await peer.send(.join(room: "metrics", user: "u\(i)"))
            try await peer.expect("history") { $0.type == "history" }
            peers.append(peer)
        }
        // Everyone has seen every join before the messages start (so that the count is exact).
        for peer in peers.dropLast() {
            try await peer.expect("the last join") { $0.type == "join" && $0.user == "u\(connections - 1)" }
        }
        for (i, peer) in peers.enumerated() {
            for j in 1...messagesEach { try await peer.send(.message(room: "metrics", text: "m \(i) \(j)")) }
        }
        // Delivery is in order per connection: once every client has every message, it has
        // everything the server sent it.
        var sent = 0
        for peer in peers {
            for i in 0..<connections {
                try await peer.expect("the last message of u\(i)") { $0.type == "message" && $0.text == "m \(i) \(messagesEach)" }
            }
            sent += await peer.events.count
        }
        return (peers, sent)
    }

    @Test func countersMatchAScriptedSessionAndTheKeyProtectsThem() async throws {
        let dir = try ChatPaths.tempDirectory()
        let (keyPath, key) = try APIClients.keyFile(in: dir)
        let server = try await ChatServerProcess(db: dir.appendingPathComponent("chat.sqlite"),
                                                 extraArguments: ["--api-key-file", keyPath])
        defer { server.child.signal(SIGKILL) }
        let url = "\(server.httpURL)metrics"
        let (connections, messagesEach) = (4, 5)
        let (peers, sent) = try await Self.scriptedSession(server, connections: connections, messagesEach: messagesEach)

        // Without the key, or with a wrong one: 401 with the JSON error body.
        let refused = try await APIClients.python("GET", url)
        #expect(refused.status == 401 && refused.errorType == "authentication_error", "\(refused)")
        #expect(try await APIClients.python("GET", url, key: key + "x").status == 401)

        let (status, samples) = try await APIClients.scrape(url, key: key)
        #expect(status == 200)
        #expect(samples["switchboard_connections_accepted_total{}"] == Double(connections), "\(samples)")
        #expect(samples["switchboard_connections_open{}"] == Double(connections), "\(samples)")
        // In: one join and the messages per client. Out: every line the clients received.
        #expect(samples["switchboard_messages_total{direction=in}"] == Double(connections * (1 + messagesEach)), "\(samples)")
        #expect(samples["switchboard_messages_total{direction=out}"] == Double(sent), "\(samples)")
        #expect((samples["switchboard_message_bytes_total{direction=in}"] ?? 0) > 0)

        // The clients leave: the gauge falls back, the closes are counted by code.
        for peer in peers { await peer.close() }
        var after: [String: Double] = [:]
        let deadline = ContinuousClock.now + .seconds(60)
        repeat {
            after = try await APIClients.scrape(url, key: key).samples
            if after["switchboard_connections_open{}"] == 0 { break }
            try await Task.sleep(for: .milliseconds(100))
        } while ContinuousClock.now < deadline
        #expect(after["switchboard_connections_open{}"] == 0, "\(after)")
        #expect(after["switchboard_closes_total{code=1000}"] == Double(connections), "\(after)")
    }

    @Test func metricsAreOpenWithoutAKey() async throws {
        let dir = try ChatPaths.tempDirectory()
        let server = try await ChatServerProcess(db: dir.appendingPathComponent("chat.sqlite"))
        defer { server.child.signal(SIGKILL) }
        let peer = try await TestPeer.connect("solo", url: server.wsURL)
        try await peer.send(.join(room: "r", user: "solo"))
        try await peer.expect("history") { $0.type == "history" }
        let (status, samples) = try await APIClients.scrape("\(server.httpURL)metrics")
        #expect(status == 200)
        #expect(samples["switchboard_connections_accepted_total{}"] == 1, "\(samples)")
        #expect(samples["switchboard_messages_total{direction=in}"] == 1, "\(samples)")
    }
}
