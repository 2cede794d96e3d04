import Testing
@testable import SwitchboardCore

@Suite("RFC 4648 base64")
struct Base64Tests {
    static let vectors: [(String, String)] = [
        ("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="), ("foobar", "Zm9vYmFy"),
    ]

    @Test func section10VectorsEncode() {
        for (plain, encoded) in Self.vectors {
            #expect(Base64.encode(Array(plain.utf8)) == encoded)
        }
    }

    @Test func section10VectorsDecode() {
        for (plain, encoded) in Self.vectors {
            #expect(Base64.decode(encoded) == Array(plain.utf8))
        }
    }

    @Test func allByteValuesRoundTrip() {
        let bytes = (0...255).map { UInt8($0) }
        for length in 0...bytes.count {
            let slice = Array(bytes.prefix(length))
            #expect(Base64.decode(Base64.encode(slice)) == slice)
        }
        #expect(Base64.encode([0xFB, 0xFF, 0xBF]) == "+/+/")
    }

    @Test func invalidInputIsRejected() {
        let invalid = [
            "Zg", "Zg=", "Zm9", // missing padding / bad length
            "Zg==Zg==", "Z===", "=Zg=", "Zm=v", "====", // padding in the wrong place
            "Zm9v\n", " Zm9v", "Zm 9", // whitespace
            "Zm9-", "Zm9_", "Zm9é=", "Zm\u{0}v", // outside the alphabet
            "Zh==", "Zm9=", // non-zero unused bits (non-canonical)
        ]
        for string in invalid {
            #expect(Base64.decode(string) == nil, "\(string.debugDescription)")
            #expect(Base64.decodedCount(string) == nil, "\(string.debugDescription)")
        }
    }

    /// The handshake's key check counts without decoding into memory: same verdicts as decode.
    @Test func decodedCountAgreesWithDecode() {
        for (plain, encoded) in Self.vectors {
            #expect(Base64.decodedCount(encoded) == plain.utf8.count)
        }
        for length in 0...40 {
            let encoded = Base64.encode((0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37) })
            #expect(Base64.decodedCount(encoded) == length)
        }
        #expect(Base64.decodedCount("dGhlIHNhbXBsZSBub25jZQ==") == 16)  // RFC 6455 §1.3's key
    }
}
