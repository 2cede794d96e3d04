import Testing
import SwitchboardCore

/// RFC 6455 §10.2 (origin considerations) and the DNS-rebinding defence: the pure decisions.
@Suite("Origin policy (RFC 6455 §10.2)")
struct OriginPolicyTests {
    @Test func requestsWithoutOriginAreAlwaysAllowed() {
        for policy in [OriginPolicy.any, .sameOrigin, .exactly(["https://a.example"])] {
            #expect(policy.allows(origin: nil, host: "127.0.0.1:8080", secure: false), "\(policy)")
        }
    }

    @Test func anyAllowsEveryOrigin() {
        #expect(OriginPolicy.any.allows(origin: "https://evil.example", host: "127.0.0.1:8080", secure: false))
        #expect(OriginPolicy.any.allows(origin: "null", host: "h", secure: false))
    }

    @Test func sameOriginComparesSchemeHostAndPort() {
        let p = OriginPolicy.sameOrigin
        #expect(p.allows(origin: "http://127.0.0.1:8080", host: "127.0.0.1:8080", secure: false))
        #expect(p.allows(origin: "http://LocalHost:8080", host: "localhost:8080", secure: false))
        #expect(p.allows(origin: "http://chat.example", host: "chat.example:80", secure: false))
        #expect(p.allows(origin: "https://chat.example:443", host: "chat.example", secure: true))
        #expect(p.allows(origin: "http://[::1]:9000", host: "[::1]:9000", secure: false))
        // Another site, another port, another scheme, opaque or malformed origins.
        #expect(!p.allows(origin: "http://evil.example:8080", host: "127.0.0.1:8080", secure: false))
        #expect(!p.allows(origin: "http://127.0.0.1:8081", host: "127.0.0.1:8080", secure: false))
        #expect(!p.allows(origin: "https://127.0.0.1:8080", host: "127.0.0.1:8080", secure: false))
        #expect(!p.allows(origin: "http://chat.example", host: "chat.example", secure: true))
        #expect(!p.allows(origin: "null", host: "127.0.0.1:8080", secure: false))
        #expect(!p.allows(origin: "http://127.0.0.1:8080@evil.example", host: "127.0.0.1:8080", secure: false))
        #expect(!p.allows(origin: "http://127.0.0.1:99999", host: "127.0.0.1:99999", secure: false))
        #expect(!p.allows(origin: "http://127.0.0.1:8080", host: nil, secure: false))
        #expect(!p.allows(origin: "", host: "", secure: false))
    }

    @Test func sameOriginAlsoAllowsListedOrigins() {
        let p = OriginPolicy.sameOrigin(also: ["https://App.Example.com"])
        #expect(p.allows(origin: "https://app.example.com", host: "127.0.0.1:8080", secure: false))
        #expect(p.allows(origin: "https://app.example.com:443", host: "127.0.0.1:8080", secure: false))
        #expect(p.allows(origin: "http://127.0.0.1:8080", host: "127.0.0.1:8080", secure: false))
        #expect(!p.allows(origin: "http://app.example.com", host: "127.0.0.1:8080", secure: false))
    }

    @Test func exactlyAllowsOnlyListedOrigins() {
        let p = OriginPolicy.exactly(["https://ok.example", "null"])
        #expect(p.allows(origin: "https://OK.example/", host: "h", secure: false))
        #expect(p.allows(origin: "null", host: "h", secure: false))
        #expect(!p.allows(origin: "http://h", host: "h", secure: false))
        #expect(!p.allows(origin: "https://ok.example.evil", host: "h", secure: false))
        #expect(!OriginPolicy.exactly([]).allows(origin: "http://h", host: "h", secure: false))
    }

    @Test func describesItself() {
        #expect(OriginPolicy.any.description == "any")
        #expect(OriginPolicy.sameOrigin.description == "sameOrigin")
        #expect(OriginPolicy.exactly(["https://a"]).description == "exactly([\"https://a\"])")
    }
}

@Suite("Loopback hosts (DNS rebinding)")
struct LoopbackHostTests {
    @Test func loopbackHostHeaders() {
        for host in ["127.0.0.1", "127.0.0.1:8080", "127.1.2.3:1", "localhost", "LOCALHOST:80", "app.localhost:3000",
                     "localhost.", "[::1]", "[::1]:8080", "[::ffff:127.0.0.1]:80"] {
            #expect(LoopbackHost.isLoopback(hostHeader: host), "\(host)")
        }
    }

    @Test func otherHostHeadersAreNotLoopback() {
        for host in ["evil.example", "evil.example:8080", "localhost.evil.example", "127.0.0.1.evil.example",
                     "128.0.0.1", "10.0.0.1:80", "[::2]:80", "127.0.0.256", "127.0.0", "", ":80", "[::1",
                     "127.0.0.1:99999", "0.0.0.0"] {
            #expect(!LoopbackHost.isLoopback(hostHeader: host), "\(host)")
        }
        #expect(!LoopbackHost.isLoopback(hostHeader: nil))
    }

    /// The byte-level parser (it runs on every handshake) agrees with the rules at the edges.
    @Test func dottedQuadsAndNamesAtTheEdges() {
        for host in ["127.0.0.1.", "127.000.000.001", "[::FFFF:127.0.0.1]", "APP.LOCALHOST", "a.b.localhost.",
                     "127.255.255.255"] {
            #expect(LoopbackHost.isLoopback(hostHeader: host), "\(host)")
        }
        for host in ["127..0.1", "1270.0.0.1", "0127.0.0.1", "127.0.0.1a", "127.0.0.1.1", ".127.0.0.1",
                     "127.0.0.", "\u{FF11}27.0.0.1", "[::ffff:evil]", "[::ffff:]", "localhos", "xlocalhost",
                     ".localhost", "127.0.0.1 "] {
            #expect(!LoopbackHost.isLoopback(hostHeader: host), "\(host)")
        }
    }

    @Test func loopbackBindAddresses() {
        for address in ["127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2"] {
            #expect(LoopbackHost.isLoopback(bindAddress: address), "\(address)")
        }
        for address in ["0.0.0.0", "::", "192.168.1.2", "example.com"] {
            #expect(!LoopbackHost.isLoopback(bindAddress: address), "\(address)")
        }
    }
}
