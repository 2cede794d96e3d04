@testable import SwitchboardRedis
import SwitchboardTestSupport
import Testing

/// `CLUSTER SLOTS` replies into slot maps: the wire format byte by byte, endpoint rules, and
/// hostile replies (each rejects the whole reply, never crashes).
struct RedisClusterSlotMapTests {
    typealias Address = RedisURL.Address
    typealias Node = RedisClusterSlotMap.Node

    /// The node the replies come from.
    static let asked = Address(host: "10.0.0.9", port: 7000)

    static func node(_ host: RESPValue, _ port: Int64, id: RESPValue? = nil, extra: [RESPValue] = []) -> RESPValue {
        .array([host, .integer(port)] + (id.map { [$0] } ?? []) + extra)
    }

    static func host(_ text: String) -> RESPValue { .bulkString(Array(text.utf8)) }

    static func entry(_ start: Int64, _ end: Int64, _ nodes: RESPValue...) -> RESPValue {
        .array([.integer(start), .integer(end)] + nodes)
    }

    static func map(_ reply: RESPValue) throws(RedisClusterSlotMapError) -> RedisClusterSlotMap {
        try RedisClusterSlotMap(clusterSlotsReply: reply, from: asked)
    }

    static func id(_ n: Int) -> String { String(repeating: String(n), count: 40) }

    /// A 3-master, 3-replica cluster as Redis 7.0 answers `CLUSTER SLOTS` over RESP2 (its
    /// `addNodeToNodeReply`): each node is `[ip, port, 40-hex id, {}]`, the empty metadata map
    /// written as an empty array, and the entries in the order of the masters' node ids, not of
    /// the slots.
    static let wire: String = {
        func node(_ port: Int, _ digit: Int) -> String {
            "*4\r\n$9\r\n127.0.0.1\r\n:\(port)\r\n$40\r\n\(id(digit))\r\n*0\r\n"
        }
        return "*3\r\n"
            + "*4\r\n:5461\r\n:10922\r\n" + node(30002, 2) + node(30005, 5)
            + "*4\r\n:0\r\n:5460\r\n" + node(30001, 1) + node(30004, 4)
            + "*4\r\n:10923\r\n:16383\r\n" + node(30003, 3) + node(30006, 6)
    }()

    static func expectTheThreeMasters(_ map: RedisClusterSlotMap) {
        let m1 = Address(host: "127.0.0.1", port: 30001)
        let m2 = Address(host: "127.0.0.1", port: 30002)
        let m3 = Address(host: "127.0.0.1", port: 30003)
        #expect(map.masters == [m1, m2, m3])
        #expect(map.ranges.map(\.slots) == [0...5460, 5461...10922, 10923...16383])
        for (slot, master) in [(0, m1), (5460, m1), (5461, m2), (10922, m2), (10923, m3), (16383, m3)] {
            #expect(map.master(for: slot) == master, "slot \(slot)")
        }
        #expect(map.master(for: -1) == nil && map.master(for: 16384) == nil && map.master(for: .min) == nil
                && map.master(for: .max) == nil)
        #expect(map.master(for: RedisClusterSlot.slot(of: "foo")) == m3)  // 12182
        #expect(map.master(for: RedisClusterSlot.slot(of: "bar")) == m1)  // 5061
        #expect(map.range(for: 7000)?.master == Node(address: m2, id: id(2)))
        #expect(map.range(for: 7000)?.replicas == [Node(address: Address(host: "127.0.0.1", port: 30005), id: id(5))])
        #expect(map.servesAllSlots && map.servedSlotCount == 16384 && map.unknownMasterSlots.isEmpty)
    }

    @Test func theWireReplyOfAThreeMasterCluster() throws {
        var parser = RESPParser()
        parser.append(Array(Self.wire.utf8))
        let reply = try #require(try parser.next())
        Self.expectTheThreeMasters(try Self.map(reply))
    }

    @Test func theWireReplyOneByteAtATime() throws {
        var parser = RESPParser()
        var reply: RESPValue?
        for byte in Self.wire.utf8 {
            #expect(reply == nil)
            parser.append([byte])
            reply = try parser.next()
        }
        Self.expectTheThreeMasters(try Self.map(try #require(reply)))
    }

    @Test func nonContiguousSlotsAndSlotsNoOneServes() throws {
        let a = Self.node(Self.host("10.0.0.1"), 7001, id: Self.host(Self.id(1)))
        let b = Self.node(Self.host("10.0.0.2"), 7002)
        let map = try Self.map(.array([Self.entry(900, 900, a), Self.entry(0, 400, a), Self.entry(1800, 6000, b, a),
                                       Self.entry(16383, 16383, b)]))
        #expect(map.masters == [Address(host: "10.0.0.1", port: 7001), Address(host: "10.0.0.2", port: 7002)])
        #expect(map.ranges.map(\.slots) == [0...400, 900...900, 1800...6000, 16383...16383])
        #expect(map.master(for: 400)?.port == 7001 && map.master(for: 401) == nil && map.master(for: 899) == nil)
        #expect(map.master(for: 900)?.port == 7001 && map.master(for: 901) == nil)
        #expect(map.master(for: 1800)?.port == 7002 && map.master(for: 6000)?.port == 7002 && map.master(for: 6001) == nil)
        #expect(map.master(for: 16383)?.port == 7002 && map.master(for: 16382) == nil)
        #expect(map.servedSlotCount == 401 + 1 + 4201 + 1 && !map.servesAllSlots)
        #expect(map.range(for: 2000)?.replicas.map(\.address.port) == [7001])
    }

    @Test func anEmptyReplyIsAnEmptyMap() throws {
        let map = try Self.map(.array([]))
        #expect(map == RedisClusterSlotMap() && map.masters.isEmpty && map.master(for: 0) == nil && map.servedSlotCount == 0)
    }

    @Test func aNullOrEmptyEndpointIsTheNodeAsked() throws {
        let map = try Self.map(.array([
            Self.entry(0, 99, Self.node(.null, 7001), Self.node(Self.host(""), 7101)),
            Self.entry(100, 199, Self.node(Self.host(""), 7002), Self.node(.null, 7102)),
            Self.entry(200, 299, Self.node(.simpleString(""), 7003)),
        ]))
        #expect(map.master(for: 0) == Address(host: "10.0.0.9", port: 7001))
        #expect(map.range(for: 0)?.replicas.map(\.address) == [Address(host: "10.0.0.9", port: 7101)])
        #expect(map.master(for: 150) == Address(host: "10.0.0.9", port: 7002))
        #expect(map.range(for: 150)?.replicas.map(\.address) == [Address(host: "10.0.0.9", port: 7102)])
        #expect(map.master(for: 299) == Address(host: "10.0.0.9", port: 7003))
    }

    /// `?`: a node configured to announce a host name it has none of; its address is unknown
    /// (the documentation: not necessarily the node asked).
    @Test func aQuestionMarkEndpointIsUnknown() throws {
        let map = try Self.map(.array([
            Self.entry(0, 99, Self.node(Self.host("?"), 7001), Self.node(Self.host("10.0.0.5"), 7101)),
            Self.entry(100, 199, Self.node(Self.host("10.0.0.2"), 7002), Self.node(Self.host("?"), 7102),
                       Self.node(Self.host("10.0.0.6"), 7103)),
        ]))
        #expect(map.master(for: 0) == nil && map.master(for: 99) == nil && map.range(for: 50) == nil)
        #expect(map.unknownMasterSlots == [0...99])
        #expect(map.masters == [Address(host: "10.0.0.2", port: 7002)])
        #expect(map.range(for: 100)?.replicas.map(\.address) == [Address(host: "10.0.0.6", port: 7103)])
        // A `?` master's slots still count against being assigned twice.
        #expect(throws: RedisClusterSlotMapError.self) {
            try Self.map(.array([Self.entry(0, 99, Self.node(Self.host("?"), 7001)),
                                 Self.entry(99, 100, Self.node(Self.host("h"), 7002))]))
        }
    }

    @Test func hostNamesIPv6AndOlderOrNewerNodeShapes() throws {
        let map = try Self.map(.array([
            // Redis 3.0: [ip, port] only.
            Self.entry(0, 9, Self.node(Self.host("10.0.0.1"), 7001)),
            // A host name preferred, with metadata (RESP2 map as a flat array) and more fields.
            Self.entry(10, 19, Self.node(Self.host("redis-1.cluster.internal"), 6379, id: Self.host(Self.id(7)),
                                         extra: [.array([Self.host("ip"), Self.host("10.0.0.2")]), .integer(42)])),
            Self.entry(20, 29, Self.node(.simpleString("::1"), 7003, id: .null)),
            Self.entry(30, 39, Self.node(Self.host("[fe80::1%eth0]"), 7004)),
            Self.entry(40, 49, Self.node(Self.host("::ffff:10.0.0.3"), 7005)),
        ]))
        #expect(map.range(for: 0)?.master == Node(address: Address(host: "10.0.0.1", port: 7001), id: nil))
        #expect(map.range(for: 10)?.master == Node(address: Address(host: "redis-1.cluster.internal", port: 6379), id: Self.id(7)))
        #expect(map.master(for: 20) == Address(host: "::1", port: 7003))
        #expect(map.master(for: 30) == Address(host: "fe80::1%eth0", port: 7004))
        #expect(map.master(for: 40) == Address(host: "::ffff:10.0.0.3", port: 7005))
    }

    static let good = entry(0, 16383, node(host("h"), 1))

    /// Replies that must be rejected whole, with what the message must mention.
    static let hostile: [(RESPValue, String)] = [
        (.integer(1), "expected an array"),
        (.null, "expected an array"),
        (.bulkString([]), "expected an array"),
        (.simpleString("OK"), "expected an array"),
        (.error("ERR This instance has cluster support disabled"), "cluster support disabled"),
        (.array([.integer(0)]), "entry 1"),
        (.array([good, .null]), "entry 2"),
        (.array([.array([])]), "got 0 elements"),
        (.array([.array([.integer(0), .integer(1)])]), "got 2 elements"),
        (.array([.array([host("0"), .integer(1), node(host("h"), 1)])]), "start slot: expected an integer"),
        (.array([.array([.integer(0), .simpleString("1"), node(host("h"), 1)])]), "end slot: expected an integer"),
        (.array([entry(-1, 5, node(host("h"), 1))]), "-1 is not within"),
        (.array([entry(0, 16384, node(host("h"), 1))]), "16384 is not within"),
        (.array([entry(.min, .max, node(host("h"), 1))]), "not within"),
        (.array([entry(.max, .max, node(host("h"), 1))]), "not within"),
        (.array([entry(6, 5, node(host("h"), 1))]), "start slot 6 is after end slot 5"),
        (.array([entry(0, 5, .null)]), "master: expected an array"),
        (.array([entry(0, 5, host("h:1"))]), "master: expected an array"),
        (.array([entry(0, 5, .array([host("h")]))]), "master: expected endpoint and port"),
        (.array([entry(0, 5, node(.integer(1), 1))]), "expected an endpoint"),
        (.array([entry(0, 5, node(.array([]), 1))]), "expected an endpoint"),
        (.array([entry(0, 5, node(.error("x"), 1))]), "expected an endpoint"),
        (.array([entry(0, 5, .array([host("h"), host("7000")]))]), "expected a port"),
        (.array([entry(0, 5, .array([host("h"), .null]))]), "expected a port"),
        (.array([entry(0, 5, node(host("h"), 0))]), "port 0 is not within"),
        (.array([entry(0, 5, node(host("h"), 65536))]), "port 65536"),
        (.array([entry(0, 5, node(host("h"), -6379))]), "port -6379"),
        (.array([entry(0, 5, node(host("h"), .max))]), "not within 1...65535"),
        (.array([entry(0, 5, node(host("h"), 1, id: .integer(5)))]), "invalid node id"),
        (.array([entry(0, 5, node(host("h"), 1, id: .array([])))]), "invalid node id"),
        (.array([entry(0, 5, node(host("h"), 1, id: host("")))]), "invalid node id"),
        (.array([entry(0, 5, node(host("h"), 1, id: host("ab cd")))]), "invalid node id \"ab cd\""),
        (.array([entry(0, 5, node(host("h"), 1, id: host(String(repeating: "a", count: 65))))]), "invalid node id"),
        (.array([entry(0, 5, node(host("two words"), 1))]), "invalid endpoint \"two words\""),
        (.array([entry(0, 5, node(host("h\r\nx"), 1))]), "invalid endpoint \"h\\x0D\\x0Ax\""),
        (.array([entry(0, 5, node(.bulkString([0x68, 0x00]), 1))]), "\\x00"),
        (.array([entry(0, 5, node(.bulkString([0xC3, 0xA9]), 1))]), "invalid endpoint"),
        (.array([entry(0, 5, node(host(String(repeating: "a", count: 256)), 1))]), "(256 bytes)"),
        (.array([entry(0, 5, node(host("a:b"), 1))]), "invalid endpoint"),
        (.array([entry(0, 5, node(host("::g"), 1))]), "invalid endpoint"),
        (.array([entry(0, 5, node(host("::1%"), 1))]), "invalid endpoint"),
        (.array([entry(0, 5, node(host("[h]"), 1))]), "invalid endpoint"),
        (.array([entry(0, 5, node(host("[]"), 1))]), "invalid endpoint"),
        (.array([entry(0, 5, node(host("[::1"), 1))]), "invalid endpoint"),
        (.array([entry(0, 5, node(host("h,i"), 1))]), "invalid endpoint"),
        (.array([entry(0, 5, node(host("h/i"), 1))]), "invalid endpoint"),
        (.array([entry(0, 5, node(host("u@h"), 1))]), "invalid endpoint"),
        (.array([entry(0, 5, node(host("??"), 1))]), "invalid endpoint"),
        // A bad replica rejects the reply even though the master is fine.
        (.array([entry(0, 5, node(host("h"), 1), node(host("r"), 0))]), "entry 1: replica 1: port 0"),
        (.array([entry(0, 5, node(host("h"), 1), node(host("r"), 2), .integer(3))]), "entry 1: replica 2"),
        // Slots given twice.
        (.array([entry(0, 5, node(host("h"), 1)), entry(5, 9, node(host("i"), 2))]), "slot 5 is assigned twice"),
        (.array([entry(0, 16383, node(host("h"), 1)), entry(0, 16383, node(host("h"), 1))]), "slot 0 is assigned twice"),
        (.array([entry(100, 200, node(host("h"), 1)), entry(0, 16383, node(host("i"), 2))]), "assigned twice"),
        (.array([good, entry(7, 7, node(host("h"), 1))]), "slot 7 is assigned twice"),
    ]

    @Test(arguments: 0..<hostile.count)
    func aMalformedReplyIsRejectedWhole(_ index: Int) {
        let (reply, mention) = Self.hostile[index]
        do {
            let map = try Self.map(reply)
            Issue.record("accepted \(reply) as \(map)")
        } catch {
            #expect(error.description.hasPrefix("invalid CLUSTER SLOTS reply: "))
            #expect(error.description.contains(mention), "\(error)")
        }
    }

    @Test func errorMessagesQuoteLittleOfTheReply() {
        let huge = String(repeating: "x", count: 1 << 20)
        for reply: RESPValue in [.array([Self.entry(0, 5, Self.node(Self.host(huge + " "), 1))]),
                                 .array([Self.entry(0, 5, Self.node(Self.host("h"), 1, id: Self.host(huge)))]),
                                 .error(huge)] {
            do {
                _ = try Self.map(reply)
                Issue.record("accepted")
            } catch {
                #expect(error.description.count < 200, "\(error.description.count) characters")
                #expect(error.description.contains("(1048576 bytes)") || error.description.contains("(1048577 bytes)"))
            }
        }
    }

    @Test func mapsFromRangesAreCheckedToo() throws {
        let a = Node(address: Address(host: "a", port: 1))
        let map = try RedisClusterSlotMap(ranges: [.init(slots: 10...20, master: a), .init(slots: 0...9, master: a)])
        #expect(map.ranges.map(\.slots) == [0...9, 10...20] && map.masters == [a.address] && map.master(for: 15) == a.address)
        #expect(throws: RedisClusterSlotMapError.self) {
            try RedisClusterSlotMap(ranges: [.init(slots: 0...9, master: a), .init(slots: 9...9, master: a)])
        }
        #expect(throws: RedisClusterSlotMapError.self) { try RedisClusterSlotMap(ranges: [.init(slots: 0...16384, master: a)]) }
        #expect(throws: RedisClusterSlotMapError.self) { try RedisClusterSlotMap(ranges: [.init(slots: -1...0, master: a)]) }
        #expect(throws: RedisClusterSlotMapError.self) {
            try RedisClusterSlotMap(ranges: [.init(slots: 0...9, master: a)], unknownMasterSlots: [5...5])
        }
        #expect(throws: RedisClusterSlotMapError.self) {
            try RedisClusterSlotMap(ranges: [], unknownMasterSlots: [16383...16384])
        }
    }

    /// Every one of 16,384 one-slot ranges, in reverse order: each slot finds its own master.
    @Test func oneRangePerSlot() throws {
        let entries: [RESPValue] = (0..<16384).reversed().map { (slot: Int) -> RESPValue in
            let node = Self.node(Self.host("n\(slot % 7)"), Int64(1 + slot % 5))
            return Self.entry(Int64(slot), Int64(slot), node)
        }
        let map = try Self.map(.array(entries))
        #expect(map.ranges.count == 16384 && map.servesAllSlots && map.masters.count == 35)
        for slot in stride(from: 0, to: 16384, by: 97) {
            #expect(map.master(for: slot) == Address(host: "n\(slot % 7)", port: 1 + slot % 5))
        }
    }

    // MARK: - Fuzz


    /// A random value, often close to a well-formed reply so that the deep checks are reached.
    static func randomValue(_ rng: inout SplitMix64, depth: Int) -> RESPValue {
        let integers: [Int64] = [0, 1, -1, 5460, 5461, 16383, 16384, 65535, 65536, .max, .min]
        let strings = ["", "?", "127.0.0.1", "::1", "[::1]", "a:b", "h h", "h\u{0}", "redis-1", String(repeating: "z", count: 300),
                       id(3), "x,y", "%"]
        switch Int.random(in: 0..<10, using: &rng) {
        case 0: return .integer(integers.randomElement(using: &rng) ?? 0)
        case 1: return .integer(Int64.random(in: -20...20_000, using: &rng))
        case 2: return .bulkString(Array((strings.randomElement(using: &rng) ?? "").utf8))
        case 3: return .simpleString(strings.randomElement(using: &rng) ?? "")
        case 4: return [.null, .error("ERR x"), .bulkString((0..<Int.random(in: 0...8, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) })]
            .randomElement(using: &rng) ?? .null
        default:
            guard depth < 4 else { return .integer(Int64.random(in: 0...16383, using: &rng)) }
            let count = Int.random(in: 0...5, using: &rng)
            return .array((0..<count).map { _ in randomValue(&rng, depth: depth + 1) })
        }
    }

    /// A plausible reply: a few entries of random slots and nodes, then one random mutation.
    static func randomReply(_ rng: inout SplitMix64) -> RESPValue {
        var entries: [RESPValue] = []
        for _ in 0..<Int.random(in: 0...6, using: &rng) {
            let start = Int64.random(in: -2...16_390, using: &rng)
            let end = Bool.random(using: &rng) ? start + Int64.random(in: 0...3000, using: &rng) : Int64.random(in: -2...16_390, using: &rng)
            var fields: [RESPValue] = [.integer(start), .integer(end)]
            for _ in 0..<Int.random(in: 1...3, using: &rng) {
                let hosts: [RESPValue] = [.bulkString(Array("10.0.0.\(Int.random(in: 1...3, using: &rng))".utf8)), .null,
                                          .bulkString([]), .bulkString(Array("?".utf8)), .bulkString(Array("::1".utf8))]
                var nodeFields: [RESPValue] = [hosts.randomElement(using: &rng) ?? .null,
                                               .integer(Int64.random(in: -1...65_536, using: &rng))]
                if Bool.random(using: &rng) { nodeFields.append(.bulkString(Array(id(Int.random(in: 0...9, using: &rng)).utf8))) }
                if Bool.random(using: &rng) { nodeFields.append(.array([])) }
                fields.append(.array(nodeFields))
            }
            entries.append(.array(fields))
        }
        var reply = RESPValue.array(entries)
        if Int.random(in: 0..<3, using: &rng) == 0 {
            reply = mutate(reply, &rng)
        }
        return reply
    }

    /// Replaces one value somewhere in `value` by a random one.
    static func mutate(_ value: RESPValue, _ rng: inout SplitMix64) -> RESPValue {
        guard case .array(var elements) = value, !elements.isEmpty, Int.random(in: 0..<4, using: &rng) != 0 else {
            return randomValue(&rng, depth: 2)
        }
        let index = Int.random(in: 0..<elements.count, using: &rng)
        elements[index] = mutate(elements[index], &rng)
        return .array(elements)
    }

    /// Whatever the reply: no crash, and either an error or a map that keeps every promise.
    @Test func randomRepliesGiveAValidMapOrAnError() {
        var rng = SplitMix64(seed: 0x5EED_C1A5)
        var accepted = 0
        var rejected = 0
        for round in 0..<20_000 {
            let reply = round.isMultiple(of: 4) ? Self.randomValue(&rng, depth: 0) : Self.randomReply(&rng)
            let map: RedisClusterSlotMap
            do {
                map = try Self.map(reply)
            } catch {
                rejected += 1
                #expect(!error.message.isEmpty)
                continue
            }
            accepted += 1
            var previousEnd = -1
            for range in map.ranges {
                #expect(range.slots.lowerBound > previousEnd && range.slots.upperBound <= 16383, "\(reply)")
                previousEnd = range.slots.upperBound
                for node in [range.master] + range.replicas {
                    #expect(!node.address.host.isEmpty && node.address.host != "?" && (1...65535).contains(node.address.port))
                }
                #expect(map.master(for: range.slots.lowerBound) == range.master.address)
                #expect(map.master(for: range.slots.upperBound) == range.master.address)
            }
            for slots in map.unknownMasterSlots {
                #expect(map.master(for: slots.lowerBound) == nil && RedisClusterSlot.range.contains(slots))
            }
            let slot = Int.random(in: 0...16383, using: &rng)
            #expect(map.master(for: slot) == map.ranges.first { $0.slots.contains(slot) }?.master.address)
        }
        // Both outcomes were exercised.
        #expect(accepted > 1000 && rejected > 1000, "accepted \(accepted), rejected \(rejected)")
    }

    /// Random bytes through the RESP parser and, when they make a value, the slot map.
    @Test func randomBytesThroughTheParserAndTheMap() {
        var rng = SplitMix64(seed: 42)
        let pieces = Array(Self.wire.utf8)
        for _ in 0..<5_000 {
            var bytes = pieces
            for _ in 0..<Int.random(in: 1...4, using: &rng) {
                let at = Int.random(in: 0..<bytes.count, using: &rng)
                bytes[at] = [UInt8(ascii: "*"), UInt8(ascii: ":"), UInt8(ascii: "$"), UInt8(ascii: "-"), UInt8(ascii: "0"),
                             UInt8(ascii: "9"), 0x0D, 0x0A, UInt8.random(in: 0...255, using: &rng)].randomElement(using: &rng) ?? 0
            }
            var parser = RESPParser(limits: RESPParseLimits(maxBulkLength: 1 << 16, maxAggregateCount: 1 << 12))
            parser.append(bytes)
            guard let value = try? parser.next() else { continue }
            if let map = try? Self.map(value) {
                #expect(map.servedSlotCount <= 16384)
            }
        }
    }
}
