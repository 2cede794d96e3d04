import Foundation
import Switchboard
import SwitchboardRedis
import SwitchboardTestSupport
import Testing

// The README's "Scaling out with Redis" snippet, verbatim but for the Redis URL, which the
// README gives as `redis://…redis.internal…` (keep in sync with README.md). It must compile;
// `remember()` runs against a real server below.

func serveScaledOut(port: Int, redisURL: String) async throws {
    var configuration = WebSocketServerConfiguration(host: "0.0.0.0", port: port)
    configuration.backplane = try RedisTopicBackplane(url: RedisURL(redisURL))
    let server = WebSocketServer(configuration: configuration)
    server.route("/chat") { connection in
        server.subscribe(connection, to: "chat")
        _ = await server.waitUntilReceivingFromOtherProcesses("chat")   // Redis SUBSCRIBE confirmed
        for await line in connection.lines() {                         // to subscribers on every process
            await server.publish(text: String(decoding: line, as: UTF8.self) + "\n", to: "chat")
        }
    }
    try await server.run()
}

func remember(redisURL: String) async throws -> String? {
    let redis = try RedisClient(url: RedisURL(redisURL))
    try await redis.send("SET", "k", "v")
    let value = try await redis.send("GET", "k").string                // "v"
    print(value ?? "")
    await redis.close()
    return value
}

@Suite(.serialized, .timeLimit(.minutes(2)))
struct ReadmeRedisSnippetTests {
    @Test func rememberRunsAgainstARealRedis() async throws {
        let redis = try await RedisServerProcess(password: "s3cret")
        defer { withExtendedLifetime(redis) {} }
        #expect(try await remember(redisURL: "redis://:s3cret@127.0.0.1:\(redis.port)/2") == "v")
        #expect(try redis.command("-n", "2", "GET", "k") == "v")
    }
}
