/// Which web origins may open a WebSocket on a server: the browser's defence against
/// cross-site WebSocket hijacking.
///
/// Browsers send an `Origin` header with every WebSocket upgrade and let any page open a
/// WebSocket to any server, cookies and all; only the server can refuse a page from another
/// site. A request without `Origin` (a program, not a browser page) is always allowed: the
/// policy protects browser users, it does not authenticate clients.
///
/// - ``any``: every origin (the library's default, so that existing servers keep working).
/// - ``sameOrigin``, ``sameOrigin(also:)``: the page must come from the server itself — the
///   `Origin`'s scheme (`https` when the server speaks TLS, else `http`), host (compared
///   case-insensitively) and port (default ports normalised: `http://a` is `http://a:80`) equal
///   the request's `Host` — or be one of the listed origins. What gorilla/websocket does by
///   default, and what the example servers use.
/// - ``exactly(_:)``: only the listed origins.
///
/// Listed origins are compared the same normalised way (`HTTPS://Example.com:443` lists
/// `https://example.com`). The opaque origin `null` (sandboxed frames, `file:` pages) is never
/// the same origin and matches only if listed.
///
/// A same-origin check alone does not stop DNS rebinding (a page whose own name was re-pointed
/// at 127.0.0.1 is "same origin" with its `Host`); a server bound to a loopback address also
/// refuses non-loopback `Host` names (see ``LoopbackHost``).
public struct OriginPolicy: Sendable, Hashable, CustomStringConvertible {
    private enum Rule: Sendable, Hashable {
        case any
        case sameOrigin(also: [String])
        case exactly([String])
    }

    private let rule: Rule
    /// The listed origins, normalised once.
    private let listed: Set<String>

    private init(_ rule: Rule, listed: [String]) {
        self.rule = rule
        self.listed = Set(listed.map { Self.normalise($0) ?? $0.lowercased() })
    }

    /// Every origin is allowed (the default of ``OriginPolicy``'s users in the library, which
    /// leaves origin checks to the application).
    public static let any = OriginPolicy(.any, listed: [])

    /// Only pages served by this server (the request's `Host`, scheme and port).
    public static let sameOrigin = OriginPolicy(.sameOrigin(also: []), listed: [])

    /// Pages served by this server, and the pages of `origins` (such as
    /// `https://app.example.com`).
    public static func sameOrigin(also origins: [String]) -> OriginPolicy {
        OriginPolicy(.sameOrigin(also: origins), listed: origins)
    }

    /// Only the pages of `origins` (such as `https://app.example.com`).
    public static func exactly(_ origins: [String]) -> OriginPolicy {
        OriginPolicy(.exactly(origins), listed: origins)
    }

    /// Whether a request may proceed.
    ///
    /// - Parameters:
    ///   - origin: the request's `Origin` header (nil when absent: always allowed).
    ///   - host: the request's `Host` header (`name[:port]`, `[v6]:port`).
    ///   - secure: whether the request came over TLS (the page's scheme must then be `https`).
    public func allows(origin: String?, host: String?, secure: Bool) -> Bool {
        guard let origin else { return true }
        switch rule {
        case .any:
            return true
        case .exactly:
            return isListed(origin)
        case .sameOrigin:
            if isListed(origin) { return true }
            guard let host, let page = Self.normalise(origin),
                  let server = Self.normalise((secure ? "https://" : "http://") + host) else { return false }
            return page == server
        }
    }

    /// Whether `origin` is something a browser sends: `scheme://host[:port]` (no path, no user
    /// information, a port within 0...65535) or `null`. For validating configured origins.
    public static func isValid(origin: String) -> Bool {
        origin == "null" || normalise(origin) != nil
    }

    private func isListed(_ origin: String) -> Bool {
        guard !listed.isEmpty else { return false }
        return listed.contains(Self.normalise(origin) ?? origin.lowercased())
    }

    /// `scheme://host:port`, lower-cased, with the default port made explicit; nil when
    /// `origin` is not a `scheme://host[:port]` (a path, user info or a bad port).
    static func normalise(_ origin: String) -> String? {
        guard let colon = origin.firstIndex(of: ":"), origin[colon...].hasPrefix("://") else { return nil }
        let scheme = origin[..<colon].lowercased()
        var authority = origin[origin.index(colon, offsetBy: 3)...]
        if authority.hasSuffix("/") { authority = authority.dropLast() }
        guard !scheme.isEmpty, !authority.isEmpty, !authority.contains("/"), !authority.contains("@"),
              let (host, port) = Self.split(authority) else { return nil }
        let resolvedPort: Int
        if let port {
            resolvedPort = port
        } else {
            switch scheme {
            case "http", "ws": resolvedPort = 80
            case "https", "wss": resolvedPort = 443
            default: return nil
            }
        }
        return "\(scheme)://\(host.lowercased()):\(resolvedPort)"
    }

    /// `host[:port]` or `[v6][:port]` split; the port, when present, must be 0...65535.
    static func split(_ authority: Substring) -> (host: Substring, port: Int?)? {
        var bytes = authority
        guard let parts = bytes.withUTF8({ split(bytes: $0) }) else { return nil }
        // `:` and `]` are ASCII, so the host's end is a character boundary.
        let utf8 = authority.utf8
        let hostEnd = utf8.index(utf8.startIndex, offsetBy: parts.host.upperBound)
        return (authority[authority.startIndex..<hostEnd], parts.port)
    }

    /// ``split(_:)`` over UTF-8 bytes: the host's byte range (brackets included) and the port.
    /// Byte by byte: it runs on every handshake.
    static func split(bytes: UnsafeBufferPointer<UInt8>) -> (host: Range<Int>, port: Int?)? {
        let count = bytes.count
        var hostEnd = count
        if count > 0, bytes[0] == UInt8(ascii: "[") {
            guard let close = bytes.firstIndex(of: UInt8(ascii: "]")) else { return nil }
            hostEnd = close + 1
        } else if let colon = bytes.lastIndex(of: UInt8(ascii: ":")) {
            hostEnd = colon
        }
        guard hostEnd > 0 else { return nil }
        if hostEnd == count { return (0..<count, nil) }
        guard bytes[hostEnd] == UInt8(ascii: ":") else { return nil }
        let digits = count - (hostEnd + 1)
        guard digits > 0, digits <= 5 else { return nil }
        var port = 0
        for index in (hostEnd + 1)..<count {
            let byte = bytes[index]
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            port = port * 10 + Int(byte - UInt8(ascii: "0"))
        }
        guard port <= 65535 else { return nil }
        return (0..<hostEnd, port)
    }

    /// `any`, `sameOrigin`, `sameOrigin(also: […])` or `exactly([…])`.
    public var description: String {
        switch rule {
        case .any: "any"
        case .sameOrigin(let also) where also.isEmpty: "sameOrigin"
        case .sameOrigin(let also): "sameOrigin(also: \(also))"
        case .exactly(let origins): "exactly(\(origins))"
        }
    }
}
