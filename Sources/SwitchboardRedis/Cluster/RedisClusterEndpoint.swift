/// The host part of an endpoint in `CLUSTER SLOTS` and in `MOVED`/`ASK` redirects.
enum RedisClusterEndpoint: Equatable {
    /// Null or empty: the node that sent it (whose address clients use, unknown to the node).
    case sameAsAsked
    /// `?`: a node whose address is not known.
    case unknown
    /// A host name or IP address (IPv6 without brackets).
    case host(String)
    /// Anything else.
    case invalid

    /// The longest host name (RFC 1035: 255 bytes).
    static let maximumHostLength = 255

    /// Classifies `bytes`. A host is 1–255 printable ASCII bytes other than space, `,`, `/`,
    /// `@`, `[`, `]`; one holding a `:` must be an IPv6 address (at least two `:`, otherwise
    /// only hex digits, `.` and a `%zone`). An IPv6 address in brackets is accepted unbracketed.
    static func host(_ bytes: [UInt8]) -> RedisClusterEndpoint {
        if bytes.isEmpty { return .sameAsAsked }
        if bytes == [UInt8(ascii: "?")] { return .unknown }
        var host = bytes[...]
        if host.first == UInt8(ascii: "["), host.last == UInt8(ascii: "]"), host.count > 2 {
            host = host.dropFirst().dropLast()
            guard host.contains(UInt8(ascii: ":")) else { return .invalid }
        }
        guard host.count <= maximumHostLength else { return .invalid }
        let forbidden: Set<UInt8> = [UInt8(ascii: ","), UInt8(ascii: "/"), UInt8(ascii: "@"), UInt8(ascii: "["),
                                     UInt8(ascii: "]"), UInt8(ascii: "?")]
        guard host.allSatisfy({ $0 > 0x20 && $0 < 0x7F && !forbidden.contains($0) }) else { return .invalid }
        let colons = host.count { $0 == UInt8(ascii: ":") }
        if colons > 0 {
            guard colons >= 2 else { return .invalid }
            let address = host.prefix { $0 != UInt8(ascii: "%") }
            guard address.allSatisfy({ isHexDigit($0) || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ".") }) else {
                return .invalid
            }
            if address.count < host.count, host.count - address.count < 2 { return .invalid }  // "%" without a zone
        }
        return .host(String(decoding: host, as: UTF8.self))
    }

    private static func isHexDigit(_ b: UInt8) -> Bool {
        (b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9")) || (b >= UInt8(ascii: "a") && b <= UInt8(ascii: "f"))
            || (b >= UInt8(ascii: "A") && b <= UInt8(ascii: "F"))
    }
}
