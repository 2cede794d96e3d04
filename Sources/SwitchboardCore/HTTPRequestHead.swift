/// The head of an HTTP/1.x request: request line and header fields (RFC 9112 §3).
public struct HTTPRequestHead: Sendable, Equatable {
    /// The method token, case-sensitive (RFC 9110 §9.1), e.g. `GET`.
    public var method: String
    /// The request target as received (origin-form `/path?query` for WebSocket requests).
    public var target: String
    /// The protocol version, e.g. `HTTP/1.1`.
    public var version: String
    /// The header fields, in order.
    public var headers: HTTPHeaders

    /// Creates a request head from its parts, as given (nothing is validated or normalized).
    public init(method: String, target: String, version: String = "HTTP/1.1", headers: HTTPHeaders = HTTPHeaders()) {
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers
    }

    /// The target up to (not including) the first `?`. Percent-decoding is NOT applied:
    /// decoding before routing would let `%2F` masquerade as a path separator.
    public var path: String {
        guard let question = target.utf8.firstIndex(of: UInt8(ascii: "?")) else { return target }
        return String(decoding: target.utf8[..<question], as: UTF8.self)
    }

    /// The raw query string after the first `?`, or `nil` when the target has no `?`.
    public var query: String? {
        guard let question = target.utf8.firstIndex(of: UInt8(ascii: "?")) else { return nil }
        return String(decoding: target.utf8[target.utf8.index(after: question)...], as: UTF8.self)
    }

    /// The query as `name=value` pairs split on `&`, in order, duplicates kept.
    ///
    /// Contract: names and values are percent-decoded (`%41` → `A`); `+` is NOT turned into a
    /// space (that is HTML form encoding, not URI syntax); an invalid escape such as `%zz` or a
    /// trailing `%` is kept literally; decoded bytes that are not UTF-8 become U+FFFD. A pair
    /// without `=` has an empty value; empty pairs (`a&&b`) are skipped.
    public var queryItems: [(name: String, value: String)] {
        guard let query else { return [] }
        return query.utf8.split(separator: UInt8(ascii: "&")).map { pair in
            if let equals = pair.firstIndex(of: UInt8(ascii: "=")) {
                return (name: Self.percentDecode(pair[..<equals]),
                        value: Self.percentDecode(pair[pair.index(after: equals)...]))
            }
            return (name: Self.percentDecode(pair), value: "")
        }
    }

    /// The request's HTTP version as numbers, or `nil` when `version` is not `HTTP/D.D`.
    var versionNumbers: (major: Int, minor: Int)? { HTTPSyntax.parseVersion(version) }

    static func percentDecode(_ bytes: Substring.UTF8View) -> String {
        let input = Array(bytes)
        var output: [UInt8] = []
        output.reserveCapacity(input.count)
        var i = 0
        while i < input.count {
            let byte = input[i]
            if byte == UInt8(ascii: "%"), i + 2 < input.count,
               let high = hexValue(input[i + 1]), let low = hexValue(input[i + 2]) {
                output.append(high << 4 | low)
                i += 3
            } else {
                output.append(byte)
                i += 1
            }
        }
        return String(decoding: output, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte &- UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte &- UInt8(ascii: "a") &+ 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte &- UInt8(ascii: "A") &+ 10
        default: return nil
        }
    }
}
