import Foundation
import SwitchboardTestSupport
import Testing

/// The test helper that runs a real `redis-server` does what the Redis tests rely on.
@Suite(.serialized)
struct RedisServerProcessTests {
    @Test func startsAndStoresKeys() async throws {
        let server = try await RedisServerProcess()
        #expect(server.url == "redis://127.0.0.1:\(server.port)")
        #expect(try server.command("SET", "k", "v") == "OK")
        #expect(try server.command("GET", "k") == "v")
        await server.stop()
        #expect(!server.isRunning)
        await server.stop()                                       // idempotent
        #expect(throws: RedisServerProcess.Failure.self) { try server.command("PING") }
    }

    @Test func restartKeepsThePortAndLosesTheData() async throws {
        let server = try await RedisServerProcess()
        let port = server.port
        let firstPid = try #require(server.pid)
        try server.command("SET", "k", "v")
        try await server.restart()
        #expect(server.port == port)
        #expect(server.pid != firstPid)
        #expect(try server.command("GET", "k") == "")            // nil reply: empty output
        try server.command("SET", "k", "w")
        await server.kill()                                           // a crash
        #expect(!server.isRunning)
        try await server.restart()
        #expect(try server.command("EXISTS", "k") == "0")
        await server.stop()
    }

    @Test func passwordProtectedServerRequiresAuth() async throws {
        let server = try await RedisServerProcess(password: "s3cret p@ss")
        #expect(server.url == "redis://:s3cret%20p%40ss@127.0.0.1:\(server.port)")
        #expect(try server.cli(["PING"], authenticate: false).hasPrefix("NOAUTH"))
        #expect(try server.command("PING") == "PONG")
        await server.stop()
    }
}
