/// An incremental UTF-8 validator (RFC 3629, as required for text messages by RFC 6455 §5.6
/// and §8.1).
///
/// Bytes may be fed in any number of pieces, splitting multi-byte sequences anywhere; the
/// validator fails fast, on the first byte that proves the input cannot be a prefix of valid
/// UTF-8. It rejects overlong encodings, UTF-16 surrogates (U+D800–U+DFFF), code points above
/// U+10FFFF, stray continuation bytes and the bytes C0, C1, F5–FF. A sequence cut short by
/// the end of the input is only detected by ``isComplete``. Once a call has returned `false`
/// the validator stays failed until ``reset()``.
public struct UTF8Validator: Sendable {
    /// Continuation bytes still expected for the current sequence (0...3).
    @usableFromInline var pending: UInt8 = 0
    /// Inclusive range allowed for the next continuation byte. Narrower than 80–BF only right
    /// after E0, ED, F0 and F4, which is how overlongs, surrogates and > U+10FFFF are rejected.
    @usableFromInline var lower: UInt8 = 0x80
    @usableFromInline var upper: UInt8 = 0xBF
    @usableFromInline var failed = false

    /// Creates a validator at the start of the input (nothing pending, not failed).
    @inlinable
    public init() {}

    /// Feeds the next bytes. Returns `false` as soon as the bytes so far cannot be a prefix of
    /// valid UTF-8 (and on every later call).
    @inlinable
    public mutating func validate(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard !failed else { return false }
        let count = bytes.count
        var index = 0
        while index < count {
            if pending == 0 {
                // ASCII fast path: eight bytes at a time while no high bit is set.
                while count &- index >= 8 {
                    let word = bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self)
                    if word & 0x8080_8080_8080_8080 != 0 { break }
                    index &+= 8
                }
                guard index < count else { break }
                let byte = bytes[index]
                index &+= 1
                switch byte {
                case 0x00...0x7F:
                    continue
                case 0xC2...0xDF:
                    pending = 1; lower = 0x80; upper = 0xBF
                case 0xE0:
                    pending = 2; lower = 0xA0; upper = 0xBF  // no overlongs below U+0800
                case 0xE1...0xEC, 0xEE, 0xEF:
                    pending = 2; lower = 0x80; upper = 0xBF
                case 0xED:
                    pending = 2; lower = 0x80; upper = 0x9F  // no surrogates U+D800–U+DFFF
                case 0xF0:
                    pending = 3; lower = 0x90; upper = 0xBF  // no overlongs below U+10000
                case 0xF1...0xF3:
                    pending = 3; lower = 0x80; upper = 0xBF
                case 0xF4:
                    pending = 3; lower = 0x80; upper = 0x8F  // nothing above U+10FFFF
                default:
                    // 80–BF stray continuation, C0/C1 overlong, F5–FF out of range.
                    failed = true
                    return false
                }
            } else {
                let byte = bytes[index]
                guard byte >= lower && byte <= upper else {
                    failed = true
                    return false
                }
                index &+= 1
                pending &-= 1
                lower = 0x80
                upper = 0xBF
            }
        }
        return true
    }

    /// True when everything fed so far is valid and no multi-byte sequence is left incomplete.
    @inlinable
    public var isComplete: Bool { !failed && pending == 0 }

    /// Forgets all input, ready for a new message.
    @inlinable
    public mutating func reset() { self = UTF8Validator() }

    /// Whether `bytes` is, as a whole, valid UTF-8.
    @inlinable
    public static func isValid(_ bytes: some Collection<UInt8>) -> Bool {
        var validator = UTF8Validator()
        let contiguous = bytes.withContiguousStorageIfAvailable { buffer in
            validator.validate(UnsafeRawBufferPointer(buffer)) && validator.isComplete
        }
        if let contiguous { return contiguous }
        return Array(bytes).withUnsafeBytes { validator.validate($0) && validator.isComplete }
    }
}
