/// Loopback names and addresses, for the DNS-rebinding defence of servers bound to loopback.
///
/// A page on `http://evil.example` whose name the attacker re-points at `127.0.0.1` reaches a
/// server on the user's machine with `Host: evil.example` — and is same-origin with it. A server
/// that listens only on loopback serves only loopback names, so it refuses any other `Host`.
public enum LoopbackHost {
    /// Whether `bindAddress` (a listening address such as `127.0.0.1`, `::1` or `localhost`) is
    /// a loopback address.
    public static func isLoopback(bindAddress: String) -> Bool {
        var address = Substring(bindAddress)
        if address.hasPrefix("["), address.hasSuffix("]") { address = address.dropFirst().dropLast() }
        return address.withUTF8 { isLoopbackName($0[...]) }
    }

    /// Whether a `Host` header (`name[:port]` or `[v6][:port]`) names this machine's loopback:
    /// `localhost` and names under `.localhost` (RFC 6761), `127.0.0.0/8`, `::1` and
    /// `::ffff:127.x.y.z`. A missing or malformed `Host` is not.
    public static func isLoopback(hostHeader: String?) -> Bool {
        guard let hostHeader, let (host, _) = OriginPolicy.split(Substring(hostHeader)) else { return false }
        var name = host
        return name.withUTF8 { bytes in
            var name = bytes[...]
            if name.first == UInt8(ascii: "[") {
                guard name.count >= 2, name.last == UInt8(ascii: "]") else { return false }
                name = name.dropFirst().dropLast()
            }
            return isLoopbackName(name)
        }
    }

    private typealias Bytes = Slice<UnsafeBufferPointer<UInt8>>

    /// Compared byte by byte (ASCII case-insensitively), without building strings: it runs on
    /// every handshake of a loopback-bound server.
    private static func isLoopbackName(_ raw: Bytes) -> Bool {
        var name = raw
        if name.last == UInt8(ascii: ".") { name.removeLast() }
        if equalsIgnoringCase(name, "localhost") { return true }
        if name.count > 10, equalsIgnoringCase(name.suffix(10), ".localhost") { return true }
        if name.elementsEqual("::1".utf8) || name.elementsEqual("0:0:0:0:0:0:0:1".utf8) { return true }
        if name.count > 7, equalsIgnoringCase(name.prefix(7), "::ffff:") { name = name.dropFirst(7) }
        // A dotted quad: four parts of one to three ASCII digits, each at most 255, the first 127.
        var parts = 0
        var value = 0
        var digits = 0
        var first: Bytes = name[name.startIndex..<name.startIndex]
        var partStart = name.startIndex
        for index in name.indices {
            let byte = name[index]
            if byte == UInt8(ascii: ".") {
                guard digits > 0, value <= 255 else { return false }
                if parts == 0 { first = name[partStart..<index] }
                parts += 1
                value = 0
                digits = 0
                partStart = index + 1
            } else if byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") {
                digits += 1
                guard digits <= 3 else { return false }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            } else {
                return false
            }
        }
        guard parts == 3, digits > 0, value <= 255 else { return false }
        return first.elementsEqual("127".utf8)
    }

    private static func equalsIgnoringCase(_ bytes: Bytes, _ lowercase: StaticString) -> Bool {
        guard bytes.count == lowercase.utf8CodeUnitCount else { return false }
        return lowercase.withUTF8Buffer { expected in
            zip(bytes, expected).allSatisfy { HTTPSyntax.asciiLowercase($0) == $1 }
        }
    }
}
