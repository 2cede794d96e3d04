import Testing
@testable import SwitchboardCore

@Suite("RFC 3629 UTF-8 validation for RFC 6455 §8.1")
struct UTF8ValidatorTests {
    static func stdlibValid(_ bytes: [UInt8]) -> Bool { String(validating: bytes, as: UTF8.self) != nil }

    /// Tricky vectors; `failsAt` is the index of the first byte proving invalidity (nil for valid
    /// input and for input that is only truncated).
    static let vectors: [(bytes: [UInt8], failsAt: Int?)] = [
        ([], nil),
        (Array("Hello, world! plain ASCII longer than eight bytes".utf8), nil),
        (Array("κόσμε".utf8), nil),
        (Array("𝄞 € ü 𐍈 \u{10FFFF} \u{FFFF} \u{D7FF} \u{E000}".utf8), nil),
        (hex("F4 8F BF BF"), nil),                       // U+10FFFF, the largest
        (hex("ED 9F BF"), nil),                          // U+D7FF, just below surrogates
        (hex("EE 80 80"), nil),                          // U+E000, just above surrogates
        (hex("C2 80"), nil), (hex("E0 A0 80"), nil), (hex("F0 90 80 80"), nil),  // smallest non-overlong
        (hex("C0 80"), 0), (hex("C1 BF"), 0),            // overlong 2-byte
        (hex("E0 80 80"), 1), (hex("E0 9F BF"), 1),      // overlong 3-byte
        (hex("F0 80 80 80"), 1), (hex("F0 8F BF BF"), 1), // overlong 4-byte
        (hex("ED A0 80"), 1), (hex("ED BF BF"), 1),      // surrogates U+D800, U+DFFF
        (hex("ED A0 80 ED B0 80"), 1),                   // surrogate pair
        (hex("F4 90 80 80"), 1),                         // U+110000
        (hex("F5 80 80 80"), 0), (hex("F8 88 80 80 80"), 0), (hex("FE"), 0), (hex("FF"), 0),
        (hex("80"), 0), (hex("BF"), 0), (hex("41 80"), 1), // stray continuation
        (hex("C2 41"), 1), (hex("E2 28 A1"), 1), (hex("F0 9D 84 41"), 3), // missing continuation
        (hex("C2"), nil), (hex("E2 82"), nil), (hex("F0 9D 84"), nil),   // truncated at end
        (Array("κόσμε".utf8) + hex("ED A0 80") + Array("edited".utf8), 11), // Autobahn 6.4.x style
        (Array("12345678".utf8) + hex("C0 AF"), 8),      // after a bulk ASCII word
        (Array("1234567".utf8) + hex("E2 82 AC") + Array("abcdefgh".utf8), nil),
        (Array("abcdefghabcdefgh".utf8) + hex("F4 90"), 17),
    ]

    @Test func agreesWithStandardLibraryOnTrickyVectorsAtEverySplit() {
        for (bytes, _) in Self.vectors {
            let expected = Self.stdlibValid(bytes)
            #expect(UTF8Validator.isValid(bytes) == expected, "\(bytes)")
            for split in 0...bytes.count {
                var validator = UTF8Validator()
                let first = Array(bytes[..<split]).withUnsafeBytes { validator.validate($0) }
                let second = Array(bytes[split...]).withUnsafeBytes { validator.validate($0) }
                #expect((first && second && validator.isComplete) == expected, "\(bytes) split at \(split)")
            }
        }
    }

    @Test func failsFastOnTheFirstInvalidByte() {
        for (bytes, failsAt) in Self.vectors {
            var validator = UTF8Validator()
            var firstFailure: Int?
            for (index, byte) in bytes.enumerated() where firstFailure == nil {
                if ![byte].withUnsafeBytes({ validator.validate($0) }) { firstFailure = index }
            }
            #expect(firstFailure == failsAt, "\(bytes)")
        }
    }

    @Test func truncatedSequenceIsValidSoFarButNotComplete() {
        var validator = UTF8Validator()
        #expect(hex("F0 9D").withUnsafeBytes { validator.validate($0) })
        #expect(!validator.isComplete)
        #expect(hex("84 9E").withUnsafeBytes { validator.validate($0) })
        #expect(validator.isComplete)
    }

    @Test func failureIsStickyUntilReset() {
        var validator = UTF8Validator()
        #expect(!hex("FF").withUnsafeBytes { validator.validate($0) })
        #expect(!validator.isComplete)
        #expect(!hex("41").withUnsafeBytes { validator.validate($0) })
        validator.reset()
        #expect(hex("41").withUnsafeBytes { validator.validate($0) })
        #expect(validator.isComplete)
    }

    @Test func isValidAcceptsNonContiguousCollections() {
        #expect(UTF8Validator.isValid(Array("héllo".utf8).lazy.map { $0 }))
        #expect(!UTF8Validator.isValid(hex("ED A0 80").lazy.map { $0 }))
        #expect(UTF8Validator.isValid("héllo".utf8))
    }

    @Test func randomizedInputAgreesWithStandardLibrary() {
        var rng = SplitMix64(seed: 0x5EED)
        let scalars: [UInt32] = [0x41, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF]
        for _ in 0..<3000 {
            var bytes: [UInt8] = []
            for _ in 0..<Int.random(in: 0...12, using: &rng) {
                let base = scalars[Int.random(in: 0..<scalars.count, using: &rng)]
                if let scalar = Unicode.Scalar(base) { bytes.append(contentsOf: Array(String(Character(scalar)).utf8)) }
            }
            // Mutate a few bytes so that roughly half the inputs are invalid.
            for _ in 0..<Int.random(in: 0...2, using: &rng) where !bytes.isEmpty {
                let index = Int.random(in: 0..<bytes.count, using: &rng)
                switch Int.random(in: 0..<3, using: &rng) {
                case 0: bytes[index] = UInt8.random(in: 0...255, using: &rng)
                case 1: bytes.remove(at: index)
                default: bytes.insert(UInt8.random(in: 0x80...0xFF, using: &rng), at: index)
                }
            }
            let expected = Self.stdlibValid(bytes)
            let split = Int.random(in: 0...bytes.count, using: &rng)
            var validator = UTF8Validator()
            let first = Array(bytes[..<split]).withUnsafeBytes { validator.validate($0) }
            let second = Array(bytes[split...]).withUnsafeBytes { validator.validate($0) }
            #expect((first && second && validator.isComplete) == expected, "\(bytes) split \(split)")
        }
    }
}
