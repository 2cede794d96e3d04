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

    /// A password whose `/`, `@`, `:`, `?` or `#` was not percent-encoded: its pieces, each
    /// distinctive enough to be found if an error quoted it.
    static let pieces = ["Zq7", "Yw8", "Xv9", "Uu6", "Tt5"]
    static let rawPassword = "Zq7/Yw8@Xv9:Uu6?Tt5#"

    @Test(arguments: [
        "redis://bob:\(RedisURLTests.rawPassword)@h:notaport",
        "redis://bob:\(RedisURLTests.rawPassword)@h:0",
        "redis://bob:\(RedisURLTests.rawPassword)@h/x",
        "redis://bob:\(RedisURLTests.rawPassword)@h/1/2",
        "redis://:\(RedisURLTests.rawPassword)@",
        "redis://bob:\(RedisURLTests.rawPassword)@h?db=1",
        "redis://bob:\(RedisURLTests.rawPassword)@[::1",
        "redis://bob:\(RedisURLTests.rawPassword)@[::1]x",
        "redis://bob:\(RedisURLTests.rawPassword)%zz@h",
        "redis://bob:Zq7/Yw8@h:nope",
        "rediz://bob:\(RedisURLTests.rawPassword)@h",
    ])
    func errorsNeverQuoteAnyPartOfThePassword(_ text: String) {
        do {
            _ = try RedisURL(text)
            Issue.record("accepted \(text)")
        } catch {
            // What `chat-room serve --redis` and `echo-server --redis` print on a bad URL.
            let printed = "--redis: \(error)"
            for piece in Self.pieces {
                #expect(!error.description.contains(piece), "\(error.description)")
                #expect(!printed.contains(piece))
                #expect(!String(reflecting: error).contains(piece))
            }
        }
    }

    @Test func aPasswordWithUnencodedDelimitersIsTakenWholeAndNeverShown() throws {
        let url = try RedisURL("rediss://bob:\(Self.rawPassword)@cache.example:6380/2")
        #expect(url == RedisURL(host: "cache.example", port: 6380, useTLS: true, username: "bob",
                                password: Self.rawPassword, database: 2))
        var dumped = ""
        dump(url, to: &dumped)
        for text in [url.description, url.debugDescription, dumped] {
            for piece in Self.pieces { #expect(!text.contains(piece), "\(text)") }
        }
        #expect(url.description == "rediss://bob:<redacted>@cache.example:6380/2")
    }
}
