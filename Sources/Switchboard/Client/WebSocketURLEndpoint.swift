import Foundation
import SwitchboardCore

/// A ready-made endpoint from a `ws://` or `wss://` URL.
public struct WebSocketURLEndpoint: SocketEndpoint {
    /// The URL's scheme.
    public var scheme: SocketScheme
    /// The URL's host (IPv6 literals without brackets).
    public var host: String
    /// The URL's port, or 443 for `wss`, 80 for `ws`.
    public var port: Int
    /// The URL's path and query as written (already percent-encoded); `/` when the URL has no path.
    public var path: String
    /// More query items, appended (encoded) after the URL's own query; empty after parsing.
    public var queryItems: [(name: String, value: String)]
    /// Extra request headers; values never appear in descriptions.
    public var headers: [(name: String, value: String)]
    /// Client TLS settings for `wss`.
    public var tls: TLSConfiguration
    /// Subprotocols to offer, in preference order.
    public var subprotocols: [String]
    /// `Origin` header to send, if any.
    public var origin: String?
    /// TCP connect timeout per address.
    public var connectTimeout: Duration
    /// Limits and timeouts of the connection.
    public var configuration: WebSocketConfiguration
    /// Direct (default), a given HTTP `CONNECT` proxy, or the environment's.
    public var proxy: ProxyConfiguration

    /// Parses `ws[s]://host[:port][/path][?query]`. The path and query are kept as written
    /// (already encoded); add more with ``queryItems``.
    ///
    /// - Throws: ``SwitchboardError`` of kind `.invalidArgument` for a scheme other than `ws`
    ///   or `wss`, a missing host, or a fragment. The message shows the URL with secret query
    ///   values and any password redacted (`URLRedaction.redactingUnparsed`, so that a password
    ///   with an unencoded `/` or `@` is hidden whole too).
    public init(url: String, headers: [(name: String, value: String)] = [], tls: TLSConfiguration = .default,
                subprotocols: [String] = [], origin: String? = nil, connectTimeout: Duration = .seconds(10),
                configuration: WebSocketConfiguration = .default,
                proxy: ProxyConfiguration = .none) throws(SwitchboardError) {
        guard let components = URLComponents(string: url), let schemeText = components.scheme?.lowercased(),
              let scheme = SocketScheme(rawValue: schemeText) else {
            throw .invalidArgument("not a ws:// or wss:// URL: \(URLRedaction.redactingUnparsed(url))")
        }
        guard let host = components.host, !host.isEmpty else {
            throw .invalidArgument("URL has no host: \(URLRedaction.redactingUnparsed(url))")
        }
        guard components.fragment == nil else { throw .invalidArgument("WebSocket URLs cannot have a fragment") }
        self.scheme = scheme
        self.host = SocketAddress.hostWithoutBrackets(host)
        self.port = components.port ?? (scheme == .wss ? 443 : 80)
        let encodedPath = components.percentEncodedPath
        let query = components.percentEncodedQuery
        self.path = (encodedPath.isEmpty ? "/" : encodedPath) + (query.map { "?\($0)" } ?? "")
        self.queryItems = []
        self.headers = headers
        self.tls = tls
        self.subprotocols = subprotocols
        self.origin = origin
        self.connectTimeout = connectTimeout
        self.configuration = configuration
        self.proxy = proxy
    }
}

extension WebSocketURLEndpoint: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// ``SocketEndpoint/redactedURL``, the header *names* only and the proxy, if any: header
    /// values (bearer tokens, cookies), secret query values (`token=<redacted>`, see
    /// `URLRedaction` in `SwitchboardCore`) and proxy passwords never appear in descriptions,
    /// logs or debugger output.
    public var description: String {
        let names = headers.map(\.name)
        return redactedURL + (names.isEmpty ? "" : " headers: [\(names.joined(separator: ", "))] (values redacted)")
            + (proxy == .none ? "" : " proxy: \(proxy)")
    }

    /// `WebSocketURLEndpoint(<description>)`: no header values, no secret query values.
    public var debugDescription: String { "WebSocketURLEndpoint(\(description))" }

    /// A mirror with the redacted URL and the header names only, so `dump` shows no secrets.
    public var customMirror: Mirror {
        Mirror(self, children: ["url": redactedURL, "headerNames": headers.map(\.name), "proxy": proxy.description],
               displayStyle: .struct)
    }
}
