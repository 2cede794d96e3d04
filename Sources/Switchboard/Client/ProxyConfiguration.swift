import Foundation
import SwitchboardCore

/// How a client reaches its server: directly, or through an HTTP proxy with a `CONNECT` tunnel.
///
/// Both `ws` and `wss` go through the tunnel; for `wss`, TLS runs inside it end to end with the
/// target host (SNI, chain and host-name verification are against the target, never the
/// proxy). Credentials go in a Basic `Proxy-Authorization` header (RFC 7617); the proxy itself
/// is spoken to in plain HTTP (`https://` proxies are not supported).
///
/// The password never appears in descriptions, debugger output, `dump`, logs or errors.
public struct ProxyConfiguration: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable {
    private enum Storage: Sendable, Equatable {
        case direct
        case environment
        case http(HTTPProxyServer)
    }

    private let storage: Storage

    private init(_ storage: Storage) { self.storage = storage }

    /// No proxy: connect to the server directly (the default).
    public static let none = ProxyConfiguration(.direct)

    /// The proxy named by the environment when connecting: `https_proxy` / `HTTPS_PROXY` for
    /// `wss`, `http_proxy` / `HTTP_PROXY` for `ws` (lowercase first), unless the host matches
    /// `no_proxy` / `NO_PROXY`. A variable's value is a proxy URL as for ``init(url:)``.
    ///
    /// `NO_PROXY` is a comma-separated list: `*` (every host), a host name that also matches
    /// its subdomains (`example.com` and `.example.com` both match `api.example.com`), or an
    /// IP address matched as written; an entry with `:port` matches that port only. CIDR
    /// ranges are not understood. Without a variable for the scheme, the connection is direct.
    public static let environment = ProxyConfiguration(.environment)

    /// A proxy given as a URL: `http://[user:password@]host[:port]`, port 80 by default;
    /// `host:port` without a scheme means `http://`. The user name and password are
    /// percent-decoded.
    ///
    /// - Throws: ``SwitchboardError`` of kind `.invalidArgument` for another scheme (`https`,
    ///   `socks5`…), a missing host, a path, or a port out of range. The message never shows
    ///   the password.
    public init(url: String) throws(SwitchboardError) {
        self.init(.http(try HTTPProxyServer(url: url)))
    }

    /// A proxy at `host`:`port`, with Basic credentials when `username` is given.
    public init(host: String, port: Int, username: String? = nil, password: String = "") {
        self.init(.http(HTTPProxyServer(host: SocketAddress.hostWithoutBrackets(host), port: port,
                                        username: username, password: password)))
    }

    /// `none`, `environment`, or `http://user:<redacted>@host:port`.
    public var description: String {
        switch storage {
        case .direct: "none"
        case .environment: "environment"
        case .http(let server): server.redactedURL
        }
    }

    /// `ProxyConfiguration(<description>)`.
    public var debugDescription: String { "ProxyConfiguration(\(description))" }

    /// The description only, so `dump` shows no password.
    public var customMirror: Mirror { Mirror(self, children: ["proxy": description], displayStyle: .struct) }

    /// The proxy to use for `scheme`://`host`:`port`, nil for a direct connection.
    func server(for scheme: SocketScheme, host: String, port: Int,
                environment: [String: String] = ProcessInfo.processInfo.environment)
        throws(SwitchboardError) -> HTTPProxyServer? {
        switch storage {
        case .direct:
            return nil
        case .http(let server):
            return server
        case .environment:
            let names = scheme == .wss ? ["https_proxy", "HTTPS_PROXY"] : ["http_proxy", "HTTP_PROXY"]
            guard let value = names.lazy.compactMap({ environment[$0] }).first(where: { !$0.isEmpty }) else {
                return nil
            }
            let noProxy = ["no_proxy", "NO_PROXY"].lazy.compactMap({ environment[$0] }).first(where: { !$0.isEmpty }) ?? ""
            if Self.noProxy(noProxy, matches: host, port: port) { return nil }
            do {
                return try HTTPProxyServer(url: value)
            } catch {
                throw .invalidArgument("the proxy environment variable for \(scheme.rawValue) is invalid: \(error.message)")
            }
        }
    }

    /// Whether a `NO_PROXY` list exempts `host`:`port` (see ``environment``).
    static func noProxy(_ list: String, matches host: String, port: Int) -> Bool {
        let target = SocketAddress.hostWithoutBrackets(host).lowercased().trimmingSuffix(".")
        for rawEntry in list.split(separator: ",") {
            var entry = rawEntry.trimmingCharacters(in: .whitespaces).lowercased()
            guard !entry.isEmpty else { continue }
            if entry == "*" { return true }
            // "host:port", "[v6]:port": a port limits the entry; a bare IPv6 address has none.
            var entryPort: Substring?
            if entry.hasPrefix("[") {
                if let close = entry.firstIndex(of: "]") {
                    let rest = entry[entry.index(after: close)...]
                    if rest.hasPrefix(":") { entryPort = rest.dropFirst() }
                    entry = String(entry[entry.index(after: entry.startIndex)..<close])
                }
            } else if entry.filter({ $0 == ":" }).count == 1, let colon = entry.lastIndex(of: ":") {
                entryPort = entry[entry.index(after: colon)...]
                entry = String(entry[..<colon])
            }
            // A port that is not a number matches no port.
            if let entryPort, Int(entryPort) != port { continue }
            // An IP address matches only as written (no suffix rule).
            if TLSSession.ipLiteral(target) != nil {
                if entry == target { return true }
                continue
            }
            if entry.hasPrefix("*.") { entry.removeFirst() }
            let bare = entry.hasPrefix(".") ? String(entry.dropFirst()) : entry
            let name = bare.trimmingSuffix(".")
            guard !name.isEmpty else { continue }
            if target == name || target.hasSuffix("." + name) { return true }
        }
        return false
    }
}

/// An HTTP proxy to tunnel through.
struct HTTPProxyServer: Sendable, Equatable {
    var host: String
    var port: Int
    var username: String?
    var password: String

    init(host: String, port: Int, username: String?, password: String) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
    }

    init(url: String) throws(SwitchboardError) {
        let text = url.contains("://") ? url : "http://" + url
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased() else {
            throw .invalidArgument("not a proxy URL: \(URLRedaction.redactingUnparsed(text))")
        }
        guard scheme == "http" else {
            throw .invalidArgument("unsupported proxy scheme \(scheme)://: only http:// proxies are supported "
                + "(for wss, TLS with the server still runs end to end inside the tunnel)")
        }
        guard let host = components.host, !host.isEmpty else {
            throw .invalidArgument("proxy URL has no host: \(URLRedaction.redactingUnparsed(text))")
        }
        guard components.path.isEmpty || components.path == "/", components.query == nil,
              components.fragment == nil else {
            throw .invalidArgument("a proxy URL has no path or query: \(URLRedaction.redactingUnparsed(text))")
        }
        let port = components.port ?? 80
        guard (1...65535).contains(port) else { throw .invalidArgument("proxy port \(port) out of range") }
        self.init(host: SocketAddress.hostWithoutBrackets(host), port: port, username: components.user,
                  password: components.password ?? "")
    }

    /// `http://user:<redacted>@host:port` (`:<redacted>` even when the password is empty, so
    /// the form never tells), or `http://host:port` without credentials.
    var redactedURL: String {
        let bracketed = host.contains(":") ? "[\(host)]" : host
        let credentials = username.map { "\(PercentEncoding.encode($0)):<redacted>@" } ?? ""
        return "http://\(credentials)\(bracketed):\(port)"
    }

    /// `host:port` for messages.
    var address: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

extension String {
    fileprivate func trimmingSuffix(_ suffix: String) -> String {
        hasSuffix(suffix) && count > suffix.count ? String(dropLast(suffix.count)) : self
    }
}
