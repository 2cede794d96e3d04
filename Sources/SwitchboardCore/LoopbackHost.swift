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
        guard var header = hostHeader else { return false }
        return header.withUTF8 { bytes in
            guard let (host, _) = OriginPolicy.split(bytes: bytes) else { return false }
            var name = bytes[host]
            if name.first == UInt8(ascii: "[") {
                guard name.count >= 2, name.last == UInt8(ascii: "]") else { return false }
                name = name.dropFirst().dropLast()
            }
            return isLoopbackName(name)
        }
    }

    private typealias Bytes = Slice<UnsafeBufferPointer<UInt8>>

    /// Compared byte by byte (ASCII case-insensitively) over plain indices, without building
    /// strings or generic sequence code: it runs on every handshake of a loopback-bound server.
    private static func isLoopbackName(_ raw: Bytes) -> Bool {
        let bytes = UnsafeBufferPointer(rebasing: raw)
        var start = 0, end = bytes.count
        if end > 0, bytes[end - 1] == UInt8(ascii: ".") { end -= 1 }
        if matches(bytes, start, end, "localhost") { return true }
        if end - start > 10, matches(bytes, end - 10, end, ".localhost") { return true }
        if matches(bytes, start, end, "::1") || matches(bytes, start, end, "0:0:0:0:0:0:0:1") { return true }
        if end - start > 7, matches(bytes, start, start + 7, "::ffff:") { start += 7 }
        // A dotted quad: four parts of one to three ASCII digits, each at most 255, the first
        // exactly `127`.
        var parts = 0
        var value = 0
        var digits = 0
        var index = start
        while index < end {
            let byte = bytes[index]
            if byte == UInt8(ascii: ".") {
                guard digits > 0, value <= 255 else { return false }
                if parts == 0, !(digits == 3 && value == 127) { return false }
                parts += 1
                value = 0
                digits = 0
            } else if byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") {
                digits += 1
                guard digits <= 3 else { return false }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            } else {
                return false
            }
            index += 1
        }
        return parts == 3 && digits > 0 && value <= 255
    }

    /// Whether `bytes[start..<end]` is `lowercase`, ignoring ASCII case.
    private static func matches(_ bytes: UnsafeBufferPointer<UInt8>, _ start: Int, _ end: Int,
                                _ lowercase: StaticString) -> Bool {
        guard end - start == lowercase.utf8CodeUnitCount else { return false }
        return lowercase.withUTF8Buffer { expected in
            for offset in 0..<expected.count where HTTPSyntax.asciiLowercase(bytes[start + offset]) != expected[offset] {
                return false
            }
            return true
        }
    }
}
