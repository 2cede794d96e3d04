@testable import SwitchboardRedis
import SwitchboardTestSupport
import Testing

/// `MOVED`, `ASK`, `TRYAGAIN` and `CLUSTERDOWN` error replies (Redis Cluster specification,
/// "Redirection and resharding"); anything else, or anything malformed, is a plain error.
struct RedisClusterRedirectTests {
    typealias Address = RedisURL.Address

    /// The node the errors come from.
    static let asked = Address(host: "10.0.0.9", port: 7000)

    static func redirect(_ message: String) -> RedisClusterRedirect? {
        RedisClusterRedirect(errorMessage: message, from: asked)
    }

    @Test func movedAndAsk() {
        #expect(Self.redirect("MOVED 3999 127.0.0.1:6381") == .moved(slot: 3999, to: Address(host: "127.0.0.1", port: 6381)))
        #expect(Self.redirect("ASK 3999 127.0.0.1:6381") == .ask(slot: 3999, to: Address(host: "127.0.0.1", port: 6381)))
        #expect(Self.redirect("MOVED 0 h:1") == .moved(slot: 0, to: Address(host: "h", port: 1)))
        #expect(Self.redirect("ASK 16383 redis-2.cluster.internal:65535")
                == .ask(slot: 16383, to: Address(host: "redis-2.cluster.internal", port: 65535)))
        #expect(Self.redirect("MOVED 00012 h:00080") == .moved(slot: 12, to: Address(host: "h", port: 80)))
    }

    /// Redis writes `%s:%d` with the bare IPv6 address: the port is after the last colon.
    @Test func ipv6Hosts() {
        #expect(Self.redirect("MOVED 1 ::1:7000") == .moved(slot: 1, to: Address(host: "::1", port: 7000)))
        #expect(Self.redirect("ASK 2 2001:db8::17:6379") == .ask(slot: 2, to: Address(host: "2001:db8::17", port: 6379)))
        #expect(Self.redirect("MOVED 3 [::1]:7000") == .moved(slot: 3, to: Address(host: "::1", port: 7000)))
        #expect(Self.redirect("MOVED 4 ::ffff:10.0.0.1:7000") == .moved(slot: 4, to: Address(host: "::ffff:10.0.0.1", port: 7000)))
    }

    /// An empty host (`cluster-preferred-endpoint-type unknown-endpoint`): the node that answered,
    /// at the port given; `?`: a node whose address is unknown.
    @Test func emptyAndUnknownHosts() {
        #expect(Self.redirect("MOVED 3999 :6380") == .moved(slot: 3999, to: Address(host: "10.0.0.9", port: 6380)))
        #expect(Self.redirect("ASK 3999 :7000") == .ask(slot: 3999, to: Self.asked))
        #expect(Self.redirect("MOVED 3999 ?:6380") == .moved(slot: 3999, to: nil))
        #expect(Self.redirect("ASK 1 ?:1") == .ask(slot: 1, to: nil))
    }

    @Test func retries() {
        #expect(Self.redirect("TRYAGAIN Multiple keys request during rehashing of slot") == .tryAgain)
        #expect(Self.redirect("TRYAGAIN") == .tryAgain)
        #expect(Self.redirect("CLUSTERDOWN The cluster is down") == .clusterDown)
        #expect(Self.redirect("CLUSTERDOWN Hash slot not served") == .clusterDown)
        #expect(Self.redirect("CLUSTERDOWN The cluster is down and only accepts read commands") == .clusterDown)
        #expect(Self.redirect("CLUSTERDOWN") == .clusterDown)
    }

    @Test func onlyErrorRepliesAreRedirects() {
        #expect(RedisClusterRedirect(.error("MOVED 1 h:2"), from: Self.asked) == .moved(slot: 1, to: Address(host: "h", port: 2)))
        #expect(RedisClusterRedirect(.error("CLUSTERDOWN x"), from: Self.asked) == .clusterDown)
        for value: RESPValue in [.simpleString("MOVED 1 h:2"), .bulkString(Array("MOVED 1 h:2".utf8)), .null, .integer(1),
                                 .array([.error("MOVED 1 h:2")]), .error("ERR unknown command")] {
            #expect(RedisClusterRedirect(value, from: Self.asked) == nil, "\(value)")
        }
    }

    @Test(arguments: [
        "", " ", "MOVED", "MOVED ", "MOVED 1", "MOVED 1 ", "MOVED 1 h", "MOVED 1 h:", "MOVED 1 :", "MOVED 1 h:0",
        "MOVED 1 h:65536", "MOVED 1 h:-1", "MOVED 1 h:+1", "MOVED 1 h:x", "MOVED 1 h:1x", "MOVED 1 h:999999",
        "MOVED 16384 h:1", "MOVED -1 h:1", "MOVED +1 h:1", "MOVED 1x h:1", "MOVED 000001 h:1", "MOVED  1 h:1",
        "MOVED 1  h:1", "MOVED 1 h:1 ", " MOVED 1 h:1", "MOVED 1 h:1 extra", "MOVED\t1 h:1", "moved 1 h:1",
        "Moved 1 h:1", "MOVEDX 1 h:1", "-MOVED 1 h:1", "ASK", "ASK 1 h", "ASKING 1 h:1", "ASK 99999999999999999999 h:1",
        "MOVED 1 h:99999999999999999999", "MOVED 1 h:1:2", "MOVED 1 a:b:1", "MOVED 1 ::1", "MOVED 1 [::1:7000",
        "MOVED 1 [::1]x:7000", "MOVED 1 [h]:1", "MOVED 1 []:1", "MOVED 1 h\u{0}:1", "MOVED 1 h\r\n:1", "MOVED 1 a,b:1",
        "MOVED 1 a/b:1", "MOVED 1 u@h:1", "MOVED 1 ??:1", "MOVED 1 hé:1", "MOVED 1 ::g:1", "MOVED 1 ::1%:1",
        "MOVED 1 \(String(repeating: "a", count: 256)):1", "MOVED 1 h:1\r\n", "MOVED １ h:1",
        "TRYAGAINX", "TRYAGAIN\tx", "tryagain", "CLUSTERDOWNx", "clusterdown", "ERR MOVED 1 h:1",
        "ERR unknown command 'CLUSTER', with args beginning with: 'SLOTS'", "WRONGTYPE Operation against a key",
        "NOAUTH Authentication required.", "CROSSSLOT Keys in request don't hash to the same slot",
    ])
    func anythingElseIsAPlainError(_ message: String) {
        #expect(Self.redirect(message) == nil, "\(message)")
    }

    @Test func theLongestHostIsAccepted() {
        let host = String(repeating: "a", count: 255)
        #expect(Self.redirect("MOVED 1 \(host):1") == .moved(slot: 1, to: Address(host: host, port: 1)))
    }

    /// Random messages from the pieces of redirects, mostly in the redirect's shape: never a
    /// crash; a redirect found always has a slot and a port in range and a usable host.
    @Test func randomMessages() {
        var rng = SplitMix64(seed: 7)
        let words = ["MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "MOVE", "ask", ""]
        let numbers = ["0", "1", "16383", "16384", "65535", "65536", "-1", "", "007", "99999999999999999999", "1x"]
        let hosts = ["h", "", "?", "::1", "[::1]", "10.0.0.1", "a:b", "[h]", "h h", "\u{0}", "é", "::g", "fe80::1%eth0", "%"]
        let noise = [" ", ":", "[", "]", "::", "\t", "\r\n"]
        var found = 0
        for _ in 0..<50_000 {
            var parts = [words.randomElement(using: &rng) ?? "", " ", numbers.randomElement(using: &rng) ?? "", " ",
                         hosts.randomElement(using: &rng) ?? "", ":", numbers.randomElement(using: &rng) ?? ""]
            for _ in 0..<Int.random(in: 0...2, using: &rng) {
                let noisy = noise.randomElement(using: &rng) ?? ""
                if Bool.random(using: &rng) {
                    parts.insert(noisy, at: Int.random(in: 0...parts.count, using: &rng))
                } else {
                    parts[Int.random(in: 0..<parts.count, using: &rng)] = noisy
                }
            }
            let message = parts.joined()
            switch Self.redirect(message) {
            case .moved(let slot, let address), .ask(let slot, let address):
                found += 1
                #expect(RedisClusterSlot.range.contains(slot), "\(message)")
                #expect(message.hasPrefix("MOVED ") || message.hasPrefix("ASK "), "\(message)")
                if let address {
                    #expect((1...65535).contains(address.port) && !address.host.isEmpty && address.host != "?"
                            && !address.host.contains(" ") && !address.host.contains("["), "\(message)")
                }
            case .tryAgain, .clusterDown:
                #expect(message.hasPrefix("TRYAGAIN") || message.hasPrefix("CLUSTERDOWN"))
            case nil:
                break
            }
        }
        // Redirects were found, not only rejections.
        #expect(found > 100, "\(found)")
    }
}
