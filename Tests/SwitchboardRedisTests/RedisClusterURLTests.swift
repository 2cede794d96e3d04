import Switchboard
import SwitchboardCore
@testable import SwitchboardRedis
import Testing

/// `redis-cluster://` and `rediss-cluster://` URLs: pure parsing.
struct RedisClusterURLTests {
    typealias Address = RedisURL.Address

    @Test func oneSeedWithTheDefaultPort() throws {
        let url = try RedisURL("redis-cluster://10.0.0.1")
        #expect(url.cluster == RedisURL.Cluster(seeds: [Address(host: "10.0.0.1", port: 6379)]))
        #expect(url.host == "10.0.0.1" && url.port == 6379 && url.database == 0 && !url.useTLS)
        #expect(url.sentinels == nil && url.username == nil && url.password == nil)
        #expect(url == RedisURL(cluster: .init(seeds: [Address(host: "10.0.0.1", port: 6379)])))
        #expect(url != RedisURL(host: "10.0.0.1"))
    }

    @Test func severalSeedsWithCredentialsAndIPv6() throws {
        let url = try RedisURL("rediss-cluster://alice:p%40ss@n1:7000,[::1],[fe80::2]:7002,n4")
        #expect(url.useTLS && url.username == "alice" && url.password == "p@ss" && url.database == 0)
        #expect(url.cluster?.seeds == [Address(host: "n1", port: 7000), Address(host: "::1", port: 6379),
                                       Address(host: "fe80::2", port: 7002), Address(host: "n4", port: 6379)])
        #expect(url.host == "n1" && url.port == 7000)
        #expect(url == RedisURL(cluster: .init(seeds: url.cluster?.seeds ?? []), useTLS: true, username: "alice",
                                password: "p@ss"))
    }

    @Test func anEmptyPathOrASlashIsAccepted() throws {
        #expect(try RedisURL("redis-cluster://h:1/").cluster?.seeds == [Address(host: "h", port: 1)])
        #expect(try RedisURL("REDIS-CLUSTER://h").cluster?.seeds == [Address(host: "h", port: 6379)])
        #expect(try RedisURL("Rediss-Cluster://h,i/").useTLS)
    }

    @Test func aPasswordWithUnencodedDelimitersIsTakenWhole() throws {
        let url = try RedisURL("redis-cluster://:a/b?c@d,e:f@h1,h2")
        #expect(url.password == "a/b?c@d,e:f" && url.username == nil)
        #expect(url.cluster?.seeds == [Address(host: "h1", port: 6379), Address(host: "h2", port: 6379)])
    }

    @Test(arguments: [
        "redis-cluster://", "rediss-cluster://", "redis-cluster:///", "redis-cluster://,h", "redis-cluster://h,",
        "redis-cluster://h,,i", "redis-cluster://h:0", "redis-cluster://h:65536", "redis-cluster://h:+1",
        "redis-cluster://h:-1", "redis-cluster://h:x", "redis-cluster://h:", "redis-cluster://[::1",
        "redis-cluster://[::1]x", "redis-cluster://[]:1", "redis-cluster://h/0", "redis-cluster://h/1",
        "redis-cluster://h//", "redis-cluster://h/x", "redis-cluster://h,i/3", "redis-cluster://h?db=1",
        "redis-cluster://h?sentinelPassword=x", "redis-cluster://h/?x", "redis-cluster://h#frag",
        "redis-cluster://u:p@", "redis-cluster://u:p@,h", "redis-clusters://h", "cluster://h",
        "redis+cluster://h", "redis-cluster:/h", "redis-cluster://h:%31",
    ])
    func refused(_ text: String) {
        #expect(throws: RedisURLError.self) { try RedisURL(text) }
    }

    @Test func aDatabaseIsRefusedWithAClearMessage() {
        #expect(throws: RedisURLError.invalid("a Redis Cluster has only database 0: remove the path \"/2\" after the seed nodes")) {
            try RedisURL("redis-cluster://h:7000,i:7001/2")
        }
        #expect(throws: RedisURLError.invalid("a Redis Cluster URL takes no query string and no fragment")) {
            try RedisURL("redis-cluster://h?sentinelPassword=x")
        }
        #expect(throws: RedisURLError.invalid("empty seed node in the list")) { try RedisURL("redis-cluster://h,,i") }
    }

    @Test func theOtherSchemesAreUnchanged() throws {
        #expect(try RedisURL("redis://h:1/2").cluster == nil)
        #expect(try RedisURL("redis-sentinel://h/m").cluster == nil)
        #expect(try RedisURL("redis-sentinel://h/m").sentinels?.masterName == "m")
        // The error for an unknown scheme names the cluster schemes too.
        do {
            _ = try RedisURL("http://h")
            Issue.record("accepted")
        } catch {
            #expect(error.description.contains("redis-cluster://"), "\(error)")
        }
    }

    /// Without a password, the description parses back to the same URL.
    @Test func theDescriptionParsesBack() throws {
        for text in ["redis-cluster://h", "rediss-cluster://alice@n1:7000,[::1],[fe80::2]:7002,n4/", "redis-cluster://10.0.0.1:1,10.0.0.1:2"] {
            let url = try RedisURL(text)
            #expect(try RedisURL(url.description) == url, "\(url)")
        }
    }

    @Test func passwordsAreNeverShown() throws {
        let url = try RedisURL("rediss-cluster://bob:Zq7-secret@h1:1,[::1]:2")
        #expect(url.description == "rediss-cluster://bob:<redacted>@h1:1,[::1]:2")
        #expect(try RedisURL("redis-cluster://h").description == "redis-cluster://h:6379")
        #expect(try RedisURL("redis-cluster://:pw@h,i:2/").description == "redis-cluster://:<redacted>@h:6379,i:2")
        var dumped = ""
        dump(url, to: &dumped)
        for text in [url.description, url.debugDescription, "\(url)", String(reflecting: url), dumped] {
            #expect(!text.contains("Zq7"), "\(text)")
        }
        let raw = "Zq7/Yw8@Xv9:Uu6?Tt5#"
        for bad in ["redis-cluster://bob:Zq7@h:x", "redis-cluster://bob:Zq7@h/1", "redis-cluster://bob:Zq7@h,",
                    "redis-cluster://bob:Zq7@h?x=1", "redis-cluster://bob:Zq7%z@h", "redis-cluster://bob:\(raw)@h:0",
                    "redis-cluster://bob:\(raw)@h/3", "redis-cluster://bob:\(raw)@[::1", "redis-cluster://bob:\(raw)@"] {
            do {
                _ = try RedisURL(bad)
                Issue.record("accepted \(bad)")
            } catch {
                for piece in ["Zq7", "Yw8", "Xv9", "Uu6", "Tt5"] {
                    #expect(!error.description.contains(piece), "\(error)")
                }
            }
        }
    }

    /// The single-server clients refuse a Cluster URL at once instead of treating its first seed
    /// as a single server, and name the cluster client; the backplane and emitter take it.
    @Test func theSingleServerClientsRefuseAClusterURL() throws {
        let url = try RedisURL("redis-cluster://:Zq7-secret@127.0.0.1:1")
        do {
            _ = try RedisClient(url: url)
            Issue.record("RedisClient accepted a Cluster URL")
        } catch {
            #expect(error.kind == .invalidArgument && error.message.contains("RedisClusterClient"), "\(error)")
            #expect(!error.description.contains("Zq7"))
        }
        #expect(throws: RedisError.self) { try RedisSubscriber(url: url) { _, _ in } }
        // The backplane and the emitter take a Cluster URL (sharded pub/sub): see
        // RedisShardedBackplaneTests.
        let backplane = try RedisTopicBackplane(url: url)
        let emitter = try RedisTopicEmitter(url: url)
        #expect(backplane.channel(for: "r") == "switchboard:topic:{room:r}" && emitter.channel(for: "r") == backplane.channel(for: "r"))
        Task { await backplane.detach(); await emitter.close() }
    }
}
