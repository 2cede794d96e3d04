import Testing
@testable import SwitchboardCore

private func hex(_ bytes: [UInt8]) -> String {
    bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
}

@Suite("RFC 3174 SHA-1")
struct SHA1Tests {
    @Test func abcMatchesTestCase1() {
        #expect(hex(SHA1.hash(Array("abc".utf8))) == "a9993e364706816aba3e25717850c26c9cd0d89d")
    }

    @Test func the448BitMessageMatchesTestCase2() {
        let message = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
        #expect(hex(SHA1.hash(Array(message.utf8))) == "84983e441c3bd26ebaae4aa1f95129e5e54670f1")
    }

    @Test func oneMillionAsMatchesTestCase3() {
        #expect(hex(SHA1.hash(repeatElement(UInt8(ascii: "a"), count: 1_000_000))) == "34aa973cd4c4daa4f61eeb2bdbad27316534016f")
    }

    @Test func emptyMessage() {
        #expect(hex(SHA1.hash([UInt8]())) == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
    }

    @Test func paddingBoundariesMatchIncrementalHashing() {
        // Lengths around the 55/56/64-byte padding boundaries, hashed whole and in pieces.
        let known: [Int: String] = [
            55: "c1c8bbdc22796e28c0e15163d20899b65621d65a",
            56: "c2db330f6083854c99d4b5bfb6e8f29f201be699",
            64: "0098ba824b5c16427bd7a1122a5a442a25ec644d",
        ]
        for length in [55, 56, 57, 63, 64, 65, 119, 120] {
            let message = [UInt8](repeating: UInt8(ascii: "a"), count: length)
            let whole = SHA1.hash(message)
            var hasher = SHA1()
            hasher.update(message.prefix(length / 3))
            hasher.update(message.dropFirst(length / 3))
            #expect(hasher.finalize() == whole, "length \(length)")
            #expect(whole.count == 20)
            if let expected = known[length] { #expect(hex(whole) == expected, "length \(length)") }
        }
    }
}
