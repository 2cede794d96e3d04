// The fuzzer compiles RESP/ into one module with SwitchboardCore's sources (scripts/fuzz).
#if canImport(SwitchboardCore)
import SwitchboardCore
#endif

/// Where a Redis server is: `redis://[[username][:password]@]host[:port][/database]`, or
/// `rediss://…` for TLS; or where the sentinels of a Sentinel-managed Redis are:
/// `redis-sentinel://[[username][:password]@]host[:port][,host[:port]…]/MASTER_NAME[/database]`
/// (`rediss-sentinel://…`: TLS to the sentinels and to the master), optionally followed by
/// `?sentinelPassword=…` (and `&sentinelUsername=…`) when the sentinels require `AUTH` of
/// their own; or the seed nodes of a Redis Cluster:
/// `redis-cluster://[[username][:password]@]host[:port][,host[:port]…]` (`rediss-cluster://…`:
/// TLS to every node). Its `description`, `debugDescription` and mirror never show a password.
public struct RedisURL: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// A host and a TCP port.
    public struct Address: Sendable, Hashable, CustomStringConvertible {
        /// Host name or IP address (IPv6 without brackets).
        public var host: String
        /// TCP port.
        public var port: Int

        /// An address from its parts.
        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        /// `host:port`, with an IPv6 host in brackets.
        public var description: String { "\(host.contains(":") ? "[\(host)]" : host):\(port)" }
    }

    /// A Sentinel-managed deployment: the sentinels to ask, in order, for the address of the
    /// master called ``masterName``, and the credentials the sentinels themselves require (often
    /// none, or not those of the master).
    public struct Sentinels: Sendable, Equatable {
        /// The sentinels (default port 26379), asked in turn; at least one.
        public var addresses: [Address]
        /// The master's name in the sentinels' configuration (`sentinel monitor NAME …`).
        public var masterName: String
        /// ACL user name for the sentinels (`sentinelUsername=`); nil for the default user.
        public var username: String?
        /// Password for the sentinels (`sentinelPassword=`), sent with `AUTH`; nil when they
        /// require none. The master's password is the URL's ``RedisURL/password``.
        public var password: String?

        /// Sentinels from their parts.
        public init(addresses: [Address], masterName: String, username: String? = nil, password: String? = nil) {
            self.addresses = addresses
            self.masterName = masterName
            self.username = username
            self.password = password
        }
    }

    /// A Redis Cluster: the nodes to ask first for the cluster's slot map (`CLUSTER SLOTS`). Any
    /// node of the cluster can answer, so a few seeds are enough; the map names all the others.
    public struct Cluster: Sendable, Equatable {
        /// The seed nodes (default port 6379), in the order given; at least one.
        public var seeds: [Address]

        /// A cluster from its seed nodes.
        public init(seeds: [Address]) {
            self.seeds = seeds
        }
    }

    /// The default port of a sentinel.
    public static let defaultSentinelPort = 26379
    /// The default port of a Redis server, and of a cluster's seed node.
    public static let defaultPort = 6379

    /// Host name or IP address (IPv6 without brackets). For a Sentinel URL, the first sentinel's
    /// (the master's address is found at run time); for a Cluster URL, the first seed's.
    public var host: String
    /// TCP port (default 6379). For a Sentinel URL, the first sentinel's; for a Cluster URL, the
    /// first seed's.
    public var port: Int
    /// `rediss`, `rediss-sentinel`, `rediss-cluster`: TLS (to the sentinels and to the master; to
    /// every node of a cluster).
    public var useTLS: Bool
    /// ACL user name (`AUTH username password`) of the server (the master); nil for the
    /// default user.
    public var username: String?
    /// Password of the server (the master), sent with `AUTH` after connecting.
    public var password: String?
    /// Database number, selected with `SELECT` after connecting (default 0). Always 0 for a
    /// Cluster URL: a Redis Cluster has only database 0.
    public var database: Int
    /// The sentinels to ask for the master, for `redis-sentinel://` and `rediss-sentinel://`
    /// URLs; nil for a single server (`redis://`, `rediss://`) and for a cluster.
    public var sentinels: Sentinels?
    /// The cluster's seed nodes, for `redis-cluster://` and `rediss-cluster://` URLs; nil
    /// otherwise. The same credentials (``username``, ``password``) are used for every node.
    public var cluster: Cluster?

    /// A URL from its parts.
    public init(host: String, port: Int = 6379, useTLS: Bool = false, username: String? = nil,
                password: String? = nil, database: Int = 0) {
        self.host = host
        self.port = port
        self.useTLS = useTLS
        self.username = username
        self.password = password
        self.database = database
        sentinels = nil
        cluster = nil
    }

    /// A Sentinel URL from its parts; ``host`` and ``port`` are the first sentinel's.
    public init(sentinels: Sentinels, useTLS: Bool = false, username: String? = nil, password: String? = nil,
                database: Int = 0) {
        host = sentinels.addresses.first?.host ?? ""
        port = sentinels.addresses.first?.port ?? Self.defaultSentinelPort
        self.useTLS = useTLS
        self.username = username
        self.password = password
        self.database = database
        self.sentinels = sentinels
        cluster = nil
    }

    /// A Cluster URL from its parts; ``host`` and ``port`` are the first seed's, ``database`` is 0.
    public init(cluster: Cluster, useTLS: Bool = false, username: String? = nil, password: String? = nil) {
        host = cluster.seeds.first?.host ?? ""
        port = cluster.seeds.first?.port ?? Self.defaultPort
        self.useTLS = useTLS
        self.username = username
        self.password = password
        database = 0
        sentinels = nil
        self.cluster = cluster
    }

    /// The query parameters of a Sentinel URL.
    private static let sentinelParameters = ["sentinelPassword", "sentinelUsername"]

    /// Parses `redis://…`, `rediss://…`, `redis-sentinel://…`, `rediss-sentinel://…`,
    /// `redis-cluster://…` or `rediss-cluster://…`. Errors never contain a password.
    ///
    /// The user info ends at the last `@`: a Redis URL has no other use for one (a database is
    /// digits, a master name has none, and other queries are refused), so a password pasted
    /// without percent-encoding its `/`, `@`, `:`, `?` or `#` is still taken whole, and never
    /// mistaken for the host, port or database that an error message quotes. `%XX` escapes are
    /// decoded.
    ///
    /// A Sentinel URL's query starts at its last `?` when `sentinelPassword=` or
    /// `sentinelUsername=` follows it; its values must percent-encode `?`, `&` and `#` (an `@` is
    /// fine). A master name is 1–128 of `A-Z a-z 0-9 . _ -`.
    ///
    /// A Cluster URL lists one or more seed nodes, comma-separated (`[v6]:port` for IPv6), and
    /// nothing else: no database (a cluster has only database 0, so any path other than an empty
    /// one or `/` is refused) and no query.
    public init(_ string: String) throws(RedisURLError) {
        guard let colon = string.firstIndex(of: ":"), string[colon...].hasPrefix("://") else {
            throw .invalid("missing scheme: expected \(Self.schemes)")
        }
        let scheme = string[..<colon]
        var rest = string[string.index(colon, offsetBy: 3)...]
        let sentinel: Bool
        var isCluster = false
        switch scheme.lowercased() {
        case "redis": (useTLS, sentinel) = (false, false)
        case "rediss": (useTLS, sentinel) = (true, false)
        case "redis-sentinel": (useTLS, sentinel) = (false, true)
        case "rediss-sentinel": (useTLS, sentinel) = (true, true)
        case "redis-cluster": (useTLS, sentinel, isCluster) = (false, false, true)
        case "rediss-cluster": (useTLS, sentinel, isCluster) = (true, false, true)
        default: throw .invalid("unsupported scheme \"\(scheme)\": expected \(Self.schemes)")
        }
        // A Sentinel URL's own query, split off first: its values may hold an `@`.
        var query: Substring?
        if sentinel, let question = rest.lastIndex(of: "?") {
            let after = rest[rest.index(after: question)...]
            if Self.sentinelParameters.contains(where: { after.hasPrefix($0 + "=") }) {
                query = after
                rest = rest[..<question]
            }
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
        if location.contains("?") || location.contains("#") {
            throw .invalid(sentinel ? "the only query parameters are sentinelPassword and sentinelUsername, and no fragment"
                                    : isCluster ? "a Redis Cluster URL takes no query string and no fragment"
                                    : "query strings and fragments are not supported")
        }
        var authority = location
        var path: Substring = ""
        if let slash = location.firstIndex(of: "/") {
            authority = location[..<slash]
            path = location[location.index(after: slash)...]
        }
        cluster = nil
        if isCluster {
            guard path.isEmpty else {
                // The path comes after the last `@`: it holds no part of the password.
                throw .invalid("a Redis Cluster has only database 0: remove the path \"/\(path)\" after the seed nodes")
            }
            let seeds = try Self.addresses(authority, defaultPort: Self.defaultPort, what: "seed node")
            host = seeds[0].host
            port = seeds[0].port
            database = 0
            sentinels = nil
            cluster = Cluster(seeds: seeds)
            return
        }
        guard sentinel else {
            let address = try Self.address(authority, defaultPort: Self.defaultPort)
            host = address.host
            port = address.port
            database = try Self.database(path)
            sentinels = nil
            return
        }
        let addresses = try Self.addresses(authority, defaultPort: Self.defaultSentinelPort, what: "sentinel address")
        let nameEnd = path.firstIndex(of: "/") ?? path.endIndex
        let name = path[..<nameEnd]
        guard !name.isEmpty else { throw .invalid("missing master name: expected /MASTER_NAME after the sentinels") }
        guard name.utf8.count <= 128, name.utf8.allSatisfy(Self.isMasterNameByte) else {
            throw .invalid("invalid master name: expected 1 to 128 of A-Z a-z 0-9 . _ -")
        }
        database = try Self.database(nameEnd == path.endIndex ? "" : path[path.index(after: nameEnd)...])
        var sentinelUsername: String?
        var sentinelPassword: String?
        for item in (query ?? "").split(separator: "&", omittingEmptySubsequences: false) where query != nil {
            guard let equals = item.firstIndex(of: "=") else { throw .invalid("a query parameter without a value") }
            let value = item[item.index(after: equals)...]
            switch item[..<equals] {
            case "sentinelPassword":
                guard sentinelPassword == nil else { throw .invalid("sentinelPassword given twice") }
                sentinelPassword = try Self.percentDecoded(value, what: "sentinel password")
            case "sentinelUsername":
                guard sentinelUsername == nil else { throw .invalid("sentinelUsername given twice") }
                sentinelUsername = try Self.percentDecoded(value, what: "sentinel user name")
            default:
                // Not quoted: it may be the rest of a value whose `&` was not encoded.
                throw .invalid("unknown query parameter: the only ones are sentinelPassword and sentinelUsername")
            }
        }
        host = addresses[0].host
        port = addresses[0].port
        sentinels = Sentinels(addresses: addresses, masterName: String(name), username: sentinelUsername,
                              password: sentinelPassword)
    }

    /// The schemes, for error messages.
    private static let schemes = "redis://, rediss://, redis-sentinel://, rediss-sentinel://, redis-cluster:// or rediss-cluster://"

    /// `host[:port][,host[:port]…]`: at least one, none empty.
    private static func addresses(_ authority: Substring, defaultPort: Int,
                                  what: String) throws(RedisURLError) -> [Address] {
        var addresses: [Address] = []
        for part in authority.split(separator: ",", omittingEmptySubsequences: false) {
            guard !part.isEmpty else { throw .invalid(authority.isEmpty ? "missing host" : "empty \(what) in the list") }
            addresses.append(try Self.address(part, defaultPort: defaultPort))
        }
        return addresses
    }

    private static func isMasterNameByte(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"):
            true
        default:
            false
        }
    }

    /// `host[:port]` or `[v6][:port]`.
    private static func address(_ authority: Substring, defaultPort: Int) throws(RedisURLError) -> Address {
        var portText: Substring?
        let host: String
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
        guard let portText else { return Address(host: host, port: defaultPort) }
        guard portText.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
              let p = Int(portText), (1...65535).contains(p) else {
            throw .invalid("invalid port \"\(portText)\"")
        }
        return Address(host: host, port: p)
    }

    /// Empty (0) or digits.
    private static func database(_ path: Substring) throws(RedisURLError) -> Int {
        if path.isEmpty { return 0 }
        guard path.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), let db = Int(path) else {
            throw .invalid("invalid database \"\(path)\": expected a non-negative number")
        }
        return db
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

    /// The URL with every password replaced by `<redacted>` (`URLRedaction.placeholder`, as in
    /// every URL the project prints).
    public var description: String {
        var userinfo = ""
        if username != nil || password != nil {
            userinfo = (username ?? "") + (password == nil ? "" : ":" + URLRedaction.placeholder) + "@"
        }
        if let cluster {
            return "\(useTLS ? "rediss" : "redis")-cluster://\(userinfo)"
                + cluster.seeds.map(\.description).joined(separator: ",")
        }
        guard let sentinels else {
            return "\(useTLS ? "rediss" : "redis")://\(userinfo)\(Address(host: host, port: port))/\(database)"
        }
        var query: [String] = []
        if sentinels.password != nil { query.append("sentinelPassword=" + URLRedaction.placeholder) }
        if let name = sentinels.username { query.append("sentinelUsername=" + name) }
        return "\(useTLS ? "rediss" : "redis")-sentinel://\(userinfo)"
            + sentinels.addresses.map(\.description).joined(separator: ",")
            + "/\(sentinels.masterName)/\(database)" + (query.isEmpty ? "" : "?" + query.joined(separator: "&"))
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
