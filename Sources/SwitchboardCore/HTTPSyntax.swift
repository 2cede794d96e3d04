/// Byte-level HTTP grammar helpers shared by the parsers, the header container and the
/// handshake builders (RFC 9110 §5.1, §5.5, §5.6; RFC 9112 §2.2).
///
/// Everything here is total: no input can make these functions trap. Package-visible only for
/// the few helpers the I/O layer shares (``trimmingOWS(_:)``); the rest is internal.
package enum HTTPSyntax {
    /// `tchar` (RFC 9110 §5.6.2): the characters allowed in a `token` such as a field name,
    /// a method or a subprotocol name.
    static func isTokenByte(_ byte: UInt8) -> Bool {
        // One bit per ASCII byte (bytes 0–63, then 64–127): DIGIT, ALPHA and
        // ! # $ % & ' * + - . ^ _ ` | ~ — a shift and a test instead of a chain of ranges.
        let low: UInt64 = 0x03FF_6CFA_0000_0000, high: UInt64 = 0x57FF_FFFF_C7FF_FFFE
        if byte < 64 { return low >> UInt64(byte) & 1 == 1 }
        if byte < 128 { return high >> UInt64(byte - 64) & 1 == 1 }
        return false
    }

    /// Whether `bytes` is a non-empty `token`.
    static func isToken(_ bytes: some Collection<UInt8>) -> Bool {
        !bytes.isEmpty && bytes.allSatisfy(isTokenByte)
    }

    /// Whether `string` is a non-empty `token`.
    static func isToken(_ string: String) -> Bool { isToken(string.utf8) }

    /// Whether `byte` may appear inside a field value: `field-vchar`, SP or HTAB
    /// (RFC 9110 §5.5). obs-text (0x80–0xFF) is allowed; NUL, CR, LF, other controls and DEL
    /// are not.
    static func isFieldValueByte(_ byte: UInt8) -> Bool {
        byte == 0x09 || (byte >= 0x20 && byte != 0x7F)
    }

    /// Whether `string` can be written as a field value without changing the message framing.
    static func isValidFieldValue(_ string: String) -> Bool {
        string.utf8.allSatisfy(isFieldValueByte)
    }

    /// Optional whitespace (RFC 9110 §5.6.3).
    static func isOWS(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }

    /// `string` without leading and trailing SP/HTAB.
    package static func trimmingOWS(_ string: String) -> String {
        let utf8 = string.utf8
        // Usually nothing to trim (the head parser trims field values): the same string, no copy.
        if let first = utf8.first, let last = utf8.last, !isOWS(first), !isOWS(last) { return string }
        guard let first = utf8.firstIndex(where: { !isOWS($0) }),
              let last = utf8.lastIndex(where: { !isOWS($0) })
        else { return "" }
        return String(decoding: utf8[first...last], as: UTF8.self)
    }

    /// ASCII case-insensitive comparison (header names, tokens). Non-ASCII bytes must match
    /// exactly.
    static func equalsIgnoringASCIICase(_ lhs: String, _ rhs: String) -> Bool {
        guard lhs.utf8.count == rhs.utf8.count else { return false }
        // Bytes equal as they are (the usual case) need no lowercasing.
        return withUTF8Bytes(lhs) { a in
            withUTF8Bytes(rhs) { b in
                for i in 0..<a.count {
                    let x = a[i], y = b[i]
                    if x != y, asciiLowercase(x) != asciiLowercase(y) { return false }
                }
                return true
            }
        }
    }

    /// Runs `body` over `string`'s UTF-8 bytes: in place for native strings (no copy), through
    /// a temporary array otherwise.
    @inline(__always)
    static func withUTF8Bytes<R>(_ string: String, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        if let result = string.utf8.withContiguousStorageIfAvailable(body) { return result }
        return Array(string.utf8).withUnsafeBufferPointer(body)
    }

    @inline(__always)
    static func asciiLowercase(_ byte: UInt8) -> UInt8 {
        (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) ? byte | 0x20 : byte
    }

    /// `string` with ASCII letters lowercased (non-ASCII left alone, unlike `lowercased()`).
    static func asciiLowercased(_ string: String) -> String {
        String(decoding: string.utf8.map(asciiLowercase), as: UTF8.self)
    }

    /// Splits a comma-separated list (RFC 9110 §5.6.1) into trimmed, non-empty elements,
    /// preserving case.
    static func listElements(_ value: String) -> [String] {
        value.utf8.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false)
            .map { trimmingOWS(String(decoding: $0, as: UTF8.self)) }
            .filter { !$0.isEmpty }
    }

    /// Decodes wire bytes of a field value or reason phrase: UTF-8 when valid, otherwise
    /// ISO-8859-1 (each byte becomes the code point of the same value) so that no byte is lost
    /// or replaced.
    static func decodeText(_ bytes: some Collection<UInt8>) -> String {
        if let string = String(validating: bytes, as: UTF8.self) { return string }
        var scalars = String.UnicodeScalarView()
        for byte in bytes { scalars.append(Unicode.Scalar(byte)) }
        return String(scalars)
    }

    /// Parses `HTTP/D.D` (RFC 9112 §2.3) into its major and minor digits.
    static func parseVersion(_ bytes: some Collection<UInt8>) -> (major: Int, minor: Int)? {
        guard bytes.count == 8 else { return nil }
        if let parsed = bytes.withContiguousStorageIfAvailable({ parseVersion(buffer: $0) }) { return parsed }
        return Array(bytes).withUnsafeBufferPointer { parseVersion(buffer: $0) }
    }

    static func parseVersion(_ string: String) -> (major: Int, minor: Int)? {
        withUTF8Bytes(string) { parseVersion(buffer: $0) }
    }

    private static func parseVersion(buffer b: UnsafeBufferPointer<UInt8>) -> (major: Int, minor: Int)? {
        guard b.count == 8,
              b[0] == UInt8(ascii: "H"), b[1] == UInt8(ascii: "T"), b[2] == UInt8(ascii: "T"),
              b[3] == UInt8(ascii: "P"), b[4] == UInt8(ascii: "/"), b[6] == UInt8(ascii: "."),
              let major = digitValue(b[5]), let minor = digitValue(b[7])
        else { return nil }
        return (major, minor)
    }

    static func digitValue(_ byte: UInt8) -> Int? {
        guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
        return Int(byte &- UInt8(ascii: "0"))
    }

    /// Whether `byte` may appear in a request target as we accept it: visible ASCII only
    /// (RFC 9112 §3.2; anything else has to be percent-encoded).
    static func isTargetByte(_ byte: UInt8) -> Bool { byte >= 0x21 && byte <= 0x7E }
}
