import Foundation
import Switchboard
import SwitchboardCore
@testable import SwitchboardRedis
import SwitchboardTestSupport
import Testing

/// The Redis client against a real `redis-server` (Debian's, started on a free port).
@Suite(.serialized, .timeLimit(.minutes(5)))
struct RedisClientTests {
    @Test func pipelinedCommandsAnswerInOrder() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }  // the server lives until the end of the test
        let client = try RedisClient(url: RedisURL(redis.url))
        try await client.connect()
        // 500 commands in flight at once, from concurrent tasks: each gets its own reply.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<500 {
                group.addTask {
                    try await client.send("SET", "k\(i)", "v\(i)")
                    let value = try await client.send("GET", "k\(i)")
                    #expect(value.string == "v\(i)")
                }
            }
            try await group.waitForAll()
        }
        #expect(try await client.send("DBSIZE").int == 500)
        // Binary-safe arguments and replies.
        let binary: [UInt8] = [0, 13, 10, 255, 36, 42]
        try await client.send(bytes: [Array("SET".utf8), Array("bin".utf8), binary])
        #expect(try await client.send("GET", "bin") == .bulkString(binary))
        #expect(try await client.send("GET", "missing") == .null)
        #expect(try await client.send("INCR", "n") == .integer(1))
        let list = try await client.send("EVAL", "return {1, 'two', {3}}", "0")
        #expect(list == .array([.integer(1), .bulkString(Array("two".utf8)), .array([.integer(3)])]))
    }

    @Test func errorRepliesThrowAndTheConnectionStays() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }  // the server lives until the end of the test
        let client = try RedisClient(url: RedisURL(redis.url))
        try await client.send("SET", "s", "x")
        do {
            try await client.send("INCR", "s")
            Issue.record("INCR on a string succeeded")
        } catch {
            #expect(error.kind == .server)
            #expect(error.message.contains("not an integer"))
        }
        #expect(try await client.send("GET", "s").string == "x")
    }

    @Test func passwordAndDatabaseFromTheURL() async throws {
        let redis = try await RedisServerProcess(password: "s3cr3t-pw")
        defer { withExtendedLifetime(redis) {} }  // the server lives until the end of the test
        let client = try RedisClient(url: RedisURL("redis://:s3cr3t-pw@127.0.0.1:\(redis.port)/2"))
        try await client.send("SET", "in-db-2", "yes")
        #expect(try redis.command("-n", "2", "GET", "in-db-2") == "yes")
        #expect(try redis.command("GET", "in-db-2") == "")

        let wrong = try RedisClient(url: RedisURL("redis://:wrong-pw@127.0.0.1:\(redis.port)"))
        do {
            try await wrong.send("PING")
            Issue.record("a wrong password was accepted")
        } catch {
            #expect(error.kind == .unavailable || error.kind == .authentication)
            #expect(!error.description.contains("wrong-pw"))
            #expect(!"\(wrong.url)".contains("wrong-pw"))
        }
    }

    @Test func unreachableRedisFailsFastThenReconnects() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }  // the server lives until the end of the test
        let states = StateLog()
        var configuration = RedisConfiguration()
        configuration.maximumReconnectDelay = .milliseconds(200)
        let client = try RedisClient(url: RedisURL(redis.url), configuration: configuration) { states.append($0) }
        try await client.send("SET", "a", "1")
        await redis.stop()
        // The connection is lost; commands fail (lost or unavailable), never hang.
        var failed = false
        for _ in 0..<200 where !failed {
            do {
                try await client.send("PING")
            } catch {
                #expect([RedisError.Kind.connectionLost, .unavailable].contains(error.kind))
                failed = true
            }
            if !failed { try await Task.sleep(for: .milliseconds(20)) }
        }
        #expect(failed)
        try await redis.restart()
        // Back by itself (with backoff): wait for the reconnection event, then commands work.
        try await states.wait { $0.contains(.connected(reconnected: true)) }
        #expect(try await client.send("PING").string == "PONG")
        #expect(try await client.send("GET", "a") == .null)  // persistence is off
    }

    @Test func subscriberReceivesAndResubscribesAfterARestart() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }  // the server lives until the end of the test
        let received = MessageLog()
        let states = StateLog()
        var configuration = RedisConfiguration()
        configuration.maximumReconnectDelay = .milliseconds(200)
        let subscriber = try RedisSubscriber(url: RedisURL(redis.url), configuration: configuration,
                                             onStateChange: { states.append($0) }) { channel, payload in
            received.append(channel, payload)
        }
        let publisher = try RedisClient(url: RedisURL(redis.url), configuration: configuration)
        try await states.wait { $0.contains(.connected(reconnected: false)) }
        #expect(await subscriber.subscribe("news"))
        #expect(try await publisher.send("PUBLISH", "news", "one").int == 1)
        #expect(try await publisher.send("PUBLISH", "other", "ignored").int == 0)
        try await received.wait { $0.contains { $0.1 == Array("one".utf8) } }
        #expect(received.all.map(\.0) == ["news"])

        try await redis.restart()
        try await states.wait { $0.contains(.connected(reconnected: true)) }
        // Re-subscribed by itself: wait until Redis confirms, then publish.
        while !subscriber.isReady { try await Task.sleep(for: .milliseconds(20)) }
        var delivered = 0
        for _ in 0..<100 where delivered == 0 {
            // The publisher reconnects on its own schedule: unavailable until then.
            delivered = Int((try? await publisher.send("PUBLISH", "news", "two"))?.int ?? 0)
            if delivered == 0 { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(delivered == 1)
        try await received.wait { $0.contains { $0.1 == Array("two".utf8) } }

        subscriber.unsubscribe("news")
        var remaining: Int64 = 1
        for _ in 0..<100 where remaining != 0 {
            remaining = try await publisher.send("PUBSUB", "NUMSUB", "news").array?.last?.int ?? 1
            if remaining != 0 { try await Task.sleep(for: .milliseconds(20)) }
        }
        #expect(remaining == 0)
    }
}

/// States seen by a handler, waited on by the test.
final class StateLog: @unchecked Sendable {
    private let lock = NSLock()
    private var states: [RedisConnectionState] = []
    func append(_ s: RedisConnectionState) { lock.withLock { states.append(s) } }
    var all: [RedisConnectionState] { lock.withLock { states } }
    func wait(_ what: String = "state", _ predicate: ([RedisConnectionState]) -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while !predicate(all) {
            if ContinuousClock.now >= deadline { throw RedisServerProcess.Failure("timed out waiting for \(what): \(all)") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}

/// Messages a subscriber received.
final class MessageLog: @unchecked Sendable {
    private let lock = NSLock()
    private var messages: [(String, [UInt8])] = []
    func append(_ channel: String, _ payload: [UInt8]) { lock.withLock { messages.append((channel, payload)) } }
    var all: [(String, [UInt8])] { lock.withLock { messages } }
    func wait(_ predicate: ([(String, [UInt8])]) -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while !predicate(all) {
            if ContinuousClock.now >= deadline { throw RedisServerProcess.Failure("timed out; got \(all.count) messages") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}
