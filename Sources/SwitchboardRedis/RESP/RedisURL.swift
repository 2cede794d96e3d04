// The fuzzer compiles RESP/ into one module with SwitchboardCore's sources (scripts/fuzz).
#if canImport(SwitchboardCore)
import SwitchboardCore
#endif

/// Where a Redis server is: `redis://[[username][:password]@]host[:port][/database]`, or
/// `rediss://…` for TLS. Its `description`, `debugDescription` and mirror never show the password.
public struct RedisURL: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// Host name or IP address (IPv6 without brackets).
    public var host: String
    /// TCP port (default 6379).
    public var port: Int
    /// `rediss`: TLS.
    public var useTLS: Bool
    /// ACL user name (`AUTH username password`); nil for the default user.
    public var username: String?
    /// Password, sent with `AUTH` after connecting.
    public var password: String?
    /// Database number, selected with `SELECT` after connecting (default 0).
    public var database: Int

    /// A URL from its parts.
    public init(host: String, port: Int = 6379, useTLS: Bool = false, username: String? = nil,
                password: String? = nil, database: Int = 0) {
        self.host = host
        self.port = port
        self.useTLS = useTLS
        self.username = username
        self.password = password
        self.database = database
    }

    /// Parses `redis://…` or `rediss://…`. Errors never contain the password.
    ///
    /// The user info ends at the last `@`: a Redis URL has no other use for one (a database is
    /// digits, and queries are refused), so a password pasted without percent-encoding its `/`,
    /// `@`, `:`, `?` or `#` is still taken whole, and never mistaken for the host, port or
    /// database that an error message quotes. `%XX` escapes are decoded.
    public init(_ string: String) throws(RedisURLError) {
        guard let colon = string.firstIndex(of: ":"), string[colon...].hasPrefix("://") else {
            throw .invalid("missing scheme: expected redis:// or rediss://")
        }
        let scheme = string[..<colon]
        let rest = string[string.index(colon, offsetBy: 3)...]
        switch scheme.lowercased() {
        case "redis": useTLS = false
        case "rediss": useTLS = true
        default: throw .invalid("unsupported scheme \"\(scheme)\": expected redis:// or rediss://")
        }
        // Everything before the last `@` is user info, and only that part may hold the password.
        var location = rest
        username = nil
        password = nil
        if let at = rest.lastIndex(of: "@") {
            let userinfo = rest[..<at]
            location = rest[rest.index(after: at)...]
            if let colon = userinfo.firstIndex(of: ":") {
                let user = userinfo[..<colon]
                username = user.isEmpty ? nil : try Self.percentDecoded(user, what: "user name")
                password = try Self.percentDecoded(userinfo[userinfo.index(after: colon)...], what: "password")
            } else if !userinfo.isEmpty {
                username = try Self.percentDecoded(userinfo, what: "user name")
            }
        }
        if location.contains("?") || location.contains("#") { throw .invalid("query strings and fragments are not supported") }
        var authority = location
        var path: Substring = ""
        if let slash = location.firstIndex(of: "/") {
            authority = location[..<slash]
            path = location[location.index(after: slash)...]
        }
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw .invalid("unterminated IPv6 address") }
            host = String(authority[authority.index(after: authority.startIndex)..<close])
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw .invalid("unexpected text after the IPv6 address") }
                portText = after.dropFirst()
            }
        } else if let colon = authority.lastIndex(of: ":") {
            host = String(authority[..<colon])
            portText = authority[authority.index(after: colon)...]
        } else {
            host = String(authority)
        }
        guard !host.isEmpty else { throw .invalid("missing host") }
        if let portText {
            guard let p = Int(portText), portText.allSatisfy(\.isASCII), (1...65535).contains(p) else {
                throw .invalid("invalid port \"\(portText)\"")
            }
            port = p
        } else {
            port = 6379
        }
        if path.isEmpty {
            database = 0
        } else {
            guard path.allSatisfy({ $0 >= "0" && $0 <= "9" }), let db = Int(path) else {
                throw .invalid("invalid database \"\(path)\": expected a non-negative number")
            }
            database = db
        }
    }

    private static func percentDecoded(_ text: Substring, what: String) throws(RedisURLError) -> String {
        var bytes: [UInt8] = []
        var utf8 = Array(text.utf8)[...]
        while let b = utf8.first {
            utf8 = utf8.dropFirst()
            if b == UInt8(ascii: "%") {
                guard utf8.count >= 2, let hi = hex(utf8[utf8.startIndex]), let lo = hex(utf8[utf8.startIndex + 1]) else {
                    throw .invalid("invalid percent-encoding in the \(what)")
                }
                bytes.append(hi << 4 | lo)
                utf8 = utf8.dropFirst(2)
            } else {
                bytes.append(b)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func hex(_ b: UInt8) -> UInt8? {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): b - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): b - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): b - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// The URL with the password replaced by `<redacted>` (`URLRedaction.placeholder`, as in
    /// every URL the project prints).
    public var description: String {
        var userinfo = ""
        if username != nil || password != nil {
            userinfo = (username ?? "") + (password == nil ? "" : ":" + URLRedaction.placeholder) + "@"
        }
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return "\(useTLS ? "rediss" : "redis")://\(userinfo)\(shownHost):\(port)/\(database)"
    }

    public var debugDescription: String { "RedisURL(\(description))" }

    public var customMirror: Mirror {
        Mirror(self, children: ["url": description], displayStyle: .struct)
    }
}

/// A Redis URL that cannot be used. The message never contains the password, nor any part of
/// it: it quotes only the scheme, host, port or database, which come before the first `:` or
/// after the last `@`.
public enum RedisURLError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong with it.
    case invalid(String)

    public var description: String {
        switch self {
        case .invalid(let why): "invalid Redis URL: \(why)"
        }
    }
}
