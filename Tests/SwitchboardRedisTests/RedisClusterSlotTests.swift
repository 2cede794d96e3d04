@testable import SwitchboardRedis
import Testing

/// CRC16 and hash slots (Redis Cluster specification, "Keys distribution model", "Hash tags",
/// appendix A).
struct RedisClusterSlotTests {
    @Test func crc16OfTheSpecificationsCheckValue() {
        // Appendix A: "Output for "123456789": 31C3".
        #expect(RedisClusterSlot.crc16(Array("123456789".utf8)) == 0x31C3)
        #expect(RedisClusterSlot.crc16([UInt8]()) == 0)
        // CRC-16/XMODEM of one byte is its table entry: polynomial 0x1021 for 0x01.
        #expect(RedisClusterSlot.crc16([0x01]) == 0x1021)
        #expect(RedisClusterSlot.crc16([0x80]) == 0x9188)
        // From Python's binascii.crc_hqx(key, 0) (CRC-CCITT XModem), an independent implementation.
        #expect(RedisClusterSlot.crc16(Array("foo".utf8)) == 0xAF96)
        #expect(RedisClusterSlot.crc16(Array("foo{bar}{zap}".utf8)) == 0xD2A2)
        #expect(RedisClusterSlot.crc16([0x00, 0xFF, 0x80]) == 0x9277)
    }

    /// Expected slots computed with redis-py 8.1.0's `redis.crc.key_slot` (an independent
    /// implementation over `binascii.crc_hqx`), e.g.
    /// `python3 -c 'from redis.crc import key_slot; print(key_slot(b"foo"))'` → 12182.
    static let vectors: [(key: [UInt8], slot: Int)] = [
        (Array("".utf8), 0),
        (Array("foo".utf8), 12182),
        (Array("bar".utf8), 5061),
        (Array("hello".utf8), 866),
        (Array("123456789".utf8), 12739),
        // The specification's hash tag examples.
        (Array("{user1000}.following".utf8), 3443),
        (Array("{user1000}.followers".utf8), 3443),
        (Array("foo{}{bar}".utf8), 8363),      // empty tag: the whole key
        (Array("foo{{bar}}zap".utf8), 4015),   // tag "{bar"
        (Array("foo{bar}{zap}".utf8), 5061),   // tag "bar", as the key "bar"
        (Array("{}".utf8), 15257),
        (Array("{".utf8), 4092),
        (Array("}".utf8), 12090),
        (Array("}{".utf8), 12793),
        (Array("x}{y}".utf8), 12222),          // tag "y": a `}` before the `{` does not count
        (Array("{a".utf8), 10276),
        (Array("a{b}c".utf8), 3300),
        ([0x00, 0xFF, 0x80], 4727),
        (Array("ключ".utf8), 10303),
        (Array("switchboard:topic:{room:lobby}".utf8), 11688),
        (Array("switchboard:chat:{room:general}:stream".utf8), 11563),
        (Array("{room:general}".utf8), 11563),
        (Array("room:general".utf8), 11563),
        (Array("{0}".utf8), 13907),
        (Array("{1}".utf8), 9842),
        (Array("{2}".utf8), 5649),
    ]

    @Test func slotsMatchRedisPy() {
        for (key, slot) in Self.vectors {
            #expect(RedisClusterSlot.slot(of: key) == slot, "\(String(decoding: key, as: UTF8.self))")
            #expect(RedisClusterSlot.slot(of: String(decoding: key, as: UTF8.self)) == slot || key == [0x00, 0xFF, 0x80])
        }
    }

    /// `key:0` … `key:99`, and `chat:{room:0}:stream` … `chat:{room:49}:stream`: slots from
    /// redis-py 8.1.0, `[key_slot(("key:%d" % i).encode()) for i in range(100)]` and
    /// `[key_slot(("chat:{room:%d}:stream" % i).encode()) for i in range(50)]`.
    @Test func manyKeysMatchRedisPy() {
        let plain = [2592, 6657, 10850, 14915, 2724, 6789, 10982, 15047, 2856, 6921, 5536, 1409, 13794, 9667, 5412,
                     1285, 13670, 9543, 5288, 1161, 243, 4306, 8369, 12432, 119, 4182, 8245, 12308, 507, 4570, 13250,
                     9187, 4992, 929, 13126, 9063, 4868, 805, 13002, 8939, 10837, 14964, 2583, 6710, 10961, 15088,
                     2707, 6834, 11101, 15228, 6500, 2373, 14630, 10503, 6624, 2497, 14754, 10627, 6252, 2125, 3127,
                     7190, 11381, 15444, 3251, 7314, 11505, 15568, 3391, 7454, 16134, 12071, 8004, 3941, 16258, 12195,
                     8128, 4065, 15886, 11823, 12088, 16153, 3962, 8027, 12220, 16285, 4094, 8159, 11824, 15889, 7177,
                     3112, 15435, 11370, 7309, 3244, 15567, 11502, 7425, 3360]
        let tagged = [15090, 10963, 6832, 2705, 14966, 10839, 6708, 2581, 15354, 11227, 8315, 12378, 57, 4120, 8447,
                      12510, 189, 4252, 8563, 12626, 13608, 9481, 5482, 1355, 13740, 9613, 5614, 1487, 13344, 9217,
                      1561, 5688, 9819, 13946, 1693, 5820, 9951, 14078, 1809, 5936, 8078, 4015, 16332, 12269, 7946,
                      3883, 16200, 12137, 7814, 3751]
        #expect(plain.indices.map { RedisClusterSlot.slot(of: "key:\($0)") } == plain)
        #expect(tagged.indices.map { RedisClusterSlot.slot(of: "chat:{room:\($0)}:stream") } == tagged)
        // A tag and the key made of it are in the same slot.
        #expect(tagged.indices.map { RedisClusterSlot.slot(of: "room:\($0)") } == tagged)
    }

    @Test func theHashedPartIsTheFirstNonEmptyTag() {
        func part(_ key: String) -> String {
            String(decoding: RedisClusterSlot.hashedPart(of: Array(key.utf8)), as: UTF8.self)
        }
        #expect(part("{user1000}.following") == "user1000")
        #expect(part("foo{}{bar}") == "foo{}{bar}")
        #expect(part("foo{{bar}}zap") == "{bar")
        #expect(part("foo{bar}{zap}") == "bar")
        #expect(part("a{b") == "a{b")
        #expect(part("a}b{c}") == "c")
        #expect(part("{}") == "{}")
        #expect(part("{{}}") == "{")
        #expect(part("") == "")
    }

    @Test func everyKeyGetsASlotInRange() {
        // Every 1- and 2-byte key, and some long ones: a slot within 0...16383, never a trap.
        var seen = Set<Int>()
        for a in 0...255 {
            let one = RedisClusterSlot.slot(of: [UInt8(a)])
            #expect(RedisClusterSlot.range.contains(one))
            seen.insert(one)
            for b in 0...255 {
                seen.insert(RedisClusterSlot.slot(of: [UInt8(a), UInt8(b)]))
            }
        }
        #expect(seen.allSatisfy { RedisClusterSlot.range.contains($0) })
        // CRC16 is a bijection on 2-byte messages: the 65,536 keys cover every slot.
        #expect(seen.count == 16384, "\(seen.count)")
        let long = [UInt8](repeating: UInt8(ascii: "{"), count: 100_000) + [UInt8(ascii: "}")]
        #expect(RedisClusterSlot.slot(of: long) == RedisClusterSlot.slot(of: Array("{".utf8).repeated(99_999)))
        #expect(RedisClusterSlot.count == 16384 && RedisClusterSlot.range == 0...16383)
    }
}

private extension Array where Element == UInt8 {
    func repeated(_ times: Int) -> [UInt8] { [[UInt8]](repeating: self, count: times).flatMap { $0 } }
}
