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
        return isLoopbackName(address)
    }

    /// Whether a `Host` header (`name[:port]` or `[v6][:port]`) names this machine's loopback:
    /// `localhost` and names under `.localhost` (RFC 6761), `127.0.0.0/8`, `::1` and
    /// `::ffff:127.x.y.z`. A missing or malformed `Host` is not.
    public static func isLoopback(hostHeader: String?) -> Bool {
        guard let hostHeader, let (host, _) = OriginPolicy.split(Substring(hostHeader)) else { return false }
        var name = host
        if name.hasPrefix("[") {
            guard name.hasSuffix("]") else { return false }
            name = name.dropFirst().dropLast()
        }
        return isLoopbackName(name)
    }

    private static func isLoopbackName(_ raw: Substring) -> Bool {
        var name = raw.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        if name == "localhost" || name.hasSuffix(".localhost") { return true }
        if name == "::1" || name == "0:0:0:0:0:0:0:1" { return true }
        if name.hasPrefix("::ffff:") { name.removeFirst("::ffff:".count) }
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4,
              parts.allSatisfy({ !$0.isEmpty && $0.count <= 3 && $0.allSatisfy { $0.isASCII && $0.isNumber } }),
              parts.allSatisfy({ (Int($0) ?? 256) <= 255 }) else { return false }
        return parts[0] == "127"
    }
}
