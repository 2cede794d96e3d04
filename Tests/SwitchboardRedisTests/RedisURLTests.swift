import SwitchboardRedis
import Testing

struct RedisURLTests {
    @Test func forms() throws {
        #expect(try RedisURL("redis://localhost") == RedisURL(host: "localhost"))
        #expect(try RedisURL("redis://10.0.0.5:7000/3") == RedisURL(host: "10.0.0.5", port: 7000, database: 3))
        #expect(try RedisURL("rediss://cache.example:6380/") == RedisURL(host: "cache.example", port: 6380, useTLS: true))
        #expect(try RedisURL("redis://:pw@h") == RedisURL(host: "h", password: "pw"))
        #expect(try RedisURL("redis://alice:p%40ss%3Aw@h:1/2") == RedisURL(host: "h", port: 1, username: "alice", password: "p@ss:w", database: 2))
        #expect(try RedisURL("redis://alice@h") == RedisURL(host: "h", username: "alice"))
        #expect(try RedisURL("redis://[::1]:6390") == RedisURL(host: "::1", port: 6390))
        #expect(try RedisURL("REDIS://h").host == "h")
    }

    @Test(arguments: ["http://h", "h:6379", "redis://", "redis://h:0", "redis://h:70000", "redis://h:x",
                      "redis://h/-1", "redis://h/x", "redis://h?db=1", "redis://[::1", "redis://:%zz@h"])
    func refused(_ text: String) {
        #expect(throws: RedisURLError.self) { try RedisURL(text) }
    }

    @Test func thePasswordIsNeverShown() throws {
        let secret = "Zq8-unique-secret"
        let url = try RedisURL("rediss://bob:\(secret)@h:6380/1")
        #expect(url.description == "rediss://bob:<redacted>@h:6380/1")
        var dumped = ""
        dump(url, to: &dumped)
        for text in [url.description, url.debugDescription, "\(url)", String(reflecting: url), dumped] {
            #expect(!text.contains(secret), "\(text)")
        }
        do {
            _ = try RedisURL("redis://bob:\(secret)@h:notaport")
            Issue.record("accepted")
        } catch {
            #expect(!error.description.contains(secret))
        }
    }
}
