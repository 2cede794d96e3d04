/// Base64 with the standard alphabet and padding (RFC 4648 §4), just enough for
/// `Sec-WebSocket-Key` and `Sec-WebSocket-Accept` (RFC 6455 §4.1, §4.2.2).
package enum Base64 {
    /// The 64 characters, in order.
    private static let alphabetText: StaticString = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    private static let alphabet: [UInt8] = alphabetText.withUTF8Buffer { Array($0) }

    /// The value of each byte in the alphabet, or 0xFF for bytes outside it.
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(truncatingIfNeeded: index) }
        return table
    }()

    /// Encodes `bytes` with `=` padding and no line breaks.
    package static func encode(_ bytes: some Collection<UInt8>) -> String {
        if let text = bytes.withContiguousStorageIfAvailable({ encode(buffer: UnsafeRawBufferPointer($0)) }) {
            return text
        }
        return Array(bytes).withUnsafeBytes { encode(buffer: $0) }
    }

    /// ``encode(_:)`` over contiguous bytes, written straight into the string's storage.
    package static func encode(buffer input: UnsafeRawBufferPointer) -> String {
        String(unsafeUninitializedCapacity: encodedCount(input.count)) { encode(input, into: $0) }
    }

    /// The length of the encoding of `count` bytes.
    package static func encodedCount(_ count: Int) -> Int { (count + 2) / 3 * 4 }

    /// Writes the encoding of `input` to the start of `output`, which holds at least
    /// ``encodedCount(_:)`` bytes; returns that count.
    package static func encode(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableBufferPointer<UInt8>) -> Int {
        let outputCount = encodedCount(input.count)
        precondition(output.count >= outputCount, "Base64.encode: output too small")
        return alphabetText.withUTF8Buffer { table in
            var i = 0, o = 0
            while input.count - i >= 3 {
                let b0 = input[i], b1 = input[i + 1], b2 = input[i + 2]
                output[o] = table[Int(b0 >> 2)]
                output[o + 1] = table[Int((b0 & 0x03) << 4 | b1 >> 4)]
                output[o + 2] = table[Int((b1 & 0x0F) << 2 | b2 >> 6)]
                output[o + 3] = table[Int(b2 & 0x3F)]
                i += 3
                o += 4
            }
            switch input.count - i {
            case 1:
                let b0 = input[i]
                output[o] = table[Int(b0 >> 2)]
                output[o + 1] = table[Int((b0 & 0x03) << 4)]
                output[o + 2] = UInt8(ascii: "=")
                output[o + 3] = UInt8(ascii: "=")
            case 2:
                let b0 = input[i], b1 = input[i + 1]
                output[o] = table[Int(b0 >> 2)]
                output[o + 1] = table[Int((b0 & 0x03) << 4 | b1 >> 4)]
                output[o + 2] = table[Int((b1 & 0x0F) << 2)]
                output[o + 3] = UInt8(ascii: "=")
            default:
                break
            }
            return outputCount
        }
    }

    /// Decodes strict base64.
    ///
    /// Contract: returns `nil` for anything that is not the canonical encoding of some byte
    /// string: a length that is not a multiple of 4, missing padding, whitespace or line
    /// breaks, characters outside the alphabet (including the URL-safe `-` and `_`), `=`
    /// anywhere but the last one or two positions, and non-zero unused bits before the padding
    /// (RFC 4648 §3.5), so every accepted string has exactly one decoding. `""` decodes to `[]`.
    package static func decode(_ string: String) -> [UInt8]? {
        HTTPSyntax.withUTF8Bytes(string) { input -> [UInt8]? in
            var output: [UInt8] = []
            output.reserveCapacity(input.count / 4 * 3)
            return decode(input, into: { output.append($0) }) ? output : nil
        }
    }

    /// The length of `string`'s decoding under ``decode(_:)``'s contract, or nil where that
    /// returns nil; decodes nothing into memory (a handshake only checks that its key is 16 bytes).
    package static func decodedCount(_ string: String) -> Int? {
        HTTPSyntax.withUTF8Bytes(string) { input -> Int? in
            var count = 0
            return decode(input, into: { _ in count += 1 }) ? count : nil
        }
    }

    /// Decodes `input` byte by byte into `emit`; false (after emitting some) if not canonical.
    @inline(__always)
    private static func decode(_ input: UnsafeBufferPointer<UInt8>, into emit: (UInt8) -> Void) -> Bool {
        guard input.count % 4 == 0 else { return false }
        var index = 0
        while index < input.count {
            let isLast = index + 4 == input.count
            let c0 = values[Int(input[index])], c1 = values[Int(input[index + 1])]
            let p2 = input[index + 2], p3 = input[index + 3]
            guard c0 != 0xFF, c1 != 0xFF else { return false }
            emit(c0 << 2 | c1 >> 4)
            if isLast && p2 == UInt8(ascii: "=") {
                return p3 == UInt8(ascii: "=") && c1 & 0x0F == 0
            }
            let c2 = values[Int(p2)]
            guard c2 != 0xFF else { return false }
            emit(c1 << 4 | c2 >> 2)
            if isLast && p3 == UInt8(ascii: "=") {
                return c2 & 0x03 == 0
            }
            let c3 = values[Int(p3)]
            guard c3 != 0xFF else { return false }
            emit(c2 << 6 | c3)
            index += 4
        }
        return true
    }
}
