/// The hash slot of a key in a Redis Cluster: `CRC16(key) mod 16384`, where only the key's hash
/// tag is hashed when it has one. Pure: no I/O.
///
/// A hash tag is the part between the first `{` and the first `}` after it, when that part is
/// not empty: `{user:1}:name` and `{user:1}:mail` hash `user:1`, so both are in the same slot,
/// and one command or script may touch both. `{}x`, `x{` and `x}{y` have no tag: the whole key
/// is hashed. Redis Cluster specification, "Hash tags" and appendix A.
public enum RedisClusterSlot {
    /// The number of hash slots of a Redis Cluster (slots `0...16383`).
    public static let count = 16384

    /// All the slots, `0...16383`.
    public static let range: ClosedRange<Int> = 0...(count - 1)

    /// The slot of `key`, in `0...16383`, honouring its hash tag.
    public static func slot(of key: [UInt8]) -> Int {
        slot(ofBytes: key[...])
    }

    /// The slot of `key`'s UTF-8 bytes, in `0...16383`, honouring its hash tag.
    public static func slot(of key: String) -> Int {
        slot(ofBytes: Array(key.utf8)[...])
    }

    /// The bytes of `key` that are hashed: its hash tag when it has one, else all of it.
    public static func hashedPart(of key: [UInt8]) -> ArraySlice<UInt8> {
        hashedPart(ofBytes: key[...])
    }

    /// The CRC16 of the Redis Cluster specification: CRC-16/XMODEM (CCITT polynomial `0x1021`,
    /// initial value 0, no reflection, no final XOR). `crc16("123456789") == 0x31C3`.
    public static func crc16<Bytes: Sequence>(_ bytes: Bytes) -> UInt16 where Bytes.Element == UInt8 {
        var crc: UInt16 = 0
        for byte in bytes {
            crc = (crc << 8) ^ table[Int(UInt8(truncatingIfNeeded: crc >> 8) ^ byte)]
        }
        return crc
    }

    private static func slot(ofBytes key: ArraySlice<UInt8>) -> Int {
        // 16384 is a power of two: the remainder is the low 14 bits.
        Int(crc16(hashedPart(ofBytes: key)) & UInt16(count - 1))
    }

    private static func hashedPart(ofBytes key: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        guard let open = key.firstIndex(of: UInt8(ascii: "{")) else { return key }
        let afterOpen = key.index(after: open)
        guard let close = key[afterOpen...].firstIndex(of: UInt8(ascii: "}")), close != afterOpen else { return key }
        return key[afterOpen..<close]
    }

    /// The 256 CRCs of one byte (most significant bit first, polynomial 0x1021).
    private static let table: [UInt16] = (0..<256).map { (value: Int) -> UInt16 in
        var crc = UInt16(truncatingIfNeeded: value) << 8
        for _ in 0..<8 {
            crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1
        }
        return crc
    }
}
