import Foundation
import Switchboard
import SwitchboardCore
@testable import SwitchboardRedis
import SwitchboardTestSupport
import Testing

/// Two servers in this process, each with its own `RedisTopicBackplane` on one real
/// `redis-server`: a topic spans both.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct RedisTopicBackplaneTests {
    /// A server whose `/sub?topic=T` route subscribes the connection to T and then publishes
    /// every message it receives to T.
    static func startServer(redis: String, queue: Int = 10_000) async throws -> (WebSocketServer, RedisTopicBackplane) {
        var configuration = RedisConfiguration()
        configuration.maximumReconnectDelay = .milliseconds(200)
        let backplane = try RedisTopicBackplane(url: RedisURL(redis), configuration: configuration,
                                                maximumQueuedPublishes: queue)
        var serverConfiguration = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        serverConfiguration.backplane = backplane
        let server = WebSocketServer(configuration: serverConfiguration)
        server.route("/sub") { connection in
            let topic = connection.request?.queryItems.first { $0.name == "topic" }?.value ?? "t"
            server.subscribe(connection, to: topic)
            // False while the backplane is still connecting (through sentinels that takes a
            // while under ThreadSanitizer): "ready" only once the topic is subscribed in Redis.
            while !(await server.waitUntilReceivingFromOtherProcesses(topic)) {
                try await Task.sleep(for: .milliseconds(20))
            }
            try await connection.send(text: "ready\n")
            for await message in connection.messages() {
                await server.publish(message, to: topic)
            }
        }
        try await server.start()
        return (server, backplane)
    }

    /// A client of `/sub?topic=`: its received texts.
    final class Client: @unchecked Sendable {
        let adapter = SocketAdapter()
        private let lock = NSLock()
        private var texts: [String] = []
        var received: [String] { lock.withLock { texts } }

        init(port: Int, topic: String) async throws {
            let lines = try await adapter.connect(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/sub?topic=\(topic)"))
            Task { [weak self] in
                for await line in lines { self?.lock.withLock { self?.texts.append(String(decoding: line, as: UTF8.self)) } }
            }
            try await wait { $0.contains("ready") }
        }

        func send(_ text: String) async throws { try await adapter.send(text: text + "\n") }

        func wait(_ predicate: ([String]) -> Bool) async throws {
            let deadline = ContinuousClock.now + .seconds(60)
            while !predicate(received) {
                if ContinuousClock.now >= deadline { throw RedisServerProcess.Failure("timed out; received \(received)") }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    @Test func aTopicSpansTwoServersOncePerMessage() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }  // the server lives until the end of the test
        let (a, backplaneA) = try await Self.startServer(redis: redis.url)
        let (b, backplaneB) = try await Self.startServer(redis: redis.url)
        defer { Task { await a.shutdown(); await b.shutdown() } }
        let portA = try await a.listeningPort, portB = try await b.listeningPort
        let a1 = try await Client(port: portA, topic: "room")
        let a2 = try await Client(port: portA, topic: "room")
        let b1 = try await Client(port: portB, topic: "room")
        let other = try await Client(port: portB, topic: "elsewhere")

        for i in 0..<50 { try await a1.send("from-a-\(i)") }
        try await b1.send("from-b")
        try await b1.wait { $0.contains("from-a-49") }
        for client in [a1, a2, b1] {
            try await client.wait { $0.contains("from-b") && $0.contains("from-a-49") }
        }
        try await a1.send("last")
        for client in [a1, a2, b1] {
            try await client.wait { $0.contains("last") }
            // Exactly once each, in order per publisher, whichever server it came through.
            let fromA = client.received.filter { $0.hasPrefix("from-a-") }
            #expect(fromA == (0..<50).map { "from-a-\($0)" })
            #expect(client.received.filter { $0 == "from-b" }.count == 1)
        }
        #expect(!other.received.contains { $0.hasPrefix("from-") })
        // Once per node, not per subscriber: A published 51, B one.
        #expect(backplaneA.statistics.published == 51 && backplaneB.statistics.published == 1)
        #expect(backplaneB.statistics.received == 51 && backplaneA.statistics.received == 1)
        // Only topics with local subscribers are subscribed in Redis.
        #expect(try redis.command("PUBSUB", "NUMSUB", "switchboard:topic:room").hasSuffix("2"))
        #expect(try redis.command("PUBSUB", "NUMSUB", "switchboard:topic:elsewhere").hasSuffix("1"))
        #expect(try redis.command("PUBSUB", "NUMSUB", "switchboard:topic:nobody").hasSuffix("0"))
    }

    @Test func redisDownLocalDeliveryGoesOnPublishesAreBoundedGapIsReported() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }  // the server lives until the end of the test
        let (a, backplaneA) = try await Self.startServer(redis: redis.url, queue: 5)
        let (b, _) = try await Self.startServer(redis: redis.url)
        defer { Task { await a.shutdown(); await b.shutdown() } }
        let portA = try await a.listeningPort, portB = try await b.listeningPort
        let a1 = try await Client(port: portA, topic: "room")
        let a2 = try await Client(port: portA, topic: "room")
        let b1 = try await Client(port: portB, topic: "room")
        try await a1.send("before")
        try await b1.wait { $0.contains("before") }

        await redis.stop()
        // Wait for the publishing connection itself to be seen down (the subscriber may notice
        // first: a publish sent on the dead connection before it is noticed is dropped too, so
        // waiting only for `isConnected` could count all twenty).
        while backplaneA.isPublishingConnectionUp { try await Task.sleep(for: .milliseconds(20)) }
        for i in 0..<20 { try await a1.send("down-\(i)") }
        // Local subscribers still get everything.
        try await a2.wait { $0.contains("down-19") }
        // Five queued, the rest dropped and counted.
        while backplaneA.statistics.dropped < 15 { try await Task.sleep(for: .milliseconds(20)) }
        #expect(backplaneA.statistics.dropped == 15)

        try await redis.restart()
        while !(backplaneA.isConnected) { try await Task.sleep(for: .milliseconds(20)) }
        // The possible gap is reported (logged and counted) per subscribed topic, on both servers.
        while a.statistics.backplaneGaps < 1 || b.statistics.backplaneGaps < 1 { try await Task.sleep(for: .milliseconds(20)) }
        #expect(a.statistics.backplaneGaps == 1 && b.statistics.backplaneGaps == 1)
        // Then messages flow again.
        var crossed = false
        for i in 0..<200 where !crossed {
            try await a1.send("after-\(i)")
            try await Task.sleep(for: .milliseconds(50))
            crossed = b1.received.contains { $0.hasPrefix("after-") }
        }
        #expect(crossed)
    }
}
