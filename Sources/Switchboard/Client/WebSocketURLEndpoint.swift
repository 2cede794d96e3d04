import Foundation
import SwitchboardCore

/// A ready-made endpoint from a `ws://` or `wss://` URL.
public struct WebSocketURLEndpoint: SocketEndpoint {
    public var scheme: SocketScheme
    public var host: String
    public var port: Int
    public var path: String
    public var queryItems: [(name: String, value: String)]
    public var headers: [(name: String, value: String)]
    public var tls: TLSConfiguration
    public var subprotocols: [String]
    public var origin: String?
    public var connectTimeout: Duration
    public var configuration: WebSocketConfiguration

    /// Parses `ws[s]://host[:port][/path][?query]`. The path and query are kept as written
    /// (already encoded); add more with ``queryItems``.
    public init(url: String, headers: [(name: String, value: String)] = [], tls: TLSConfiguration = .default,
                subprotocols: [String] = [], origin: String? = nil, connectTimeout: Duration = .seconds(10),
                configuration: WebSocketConfiguration = .default) throws(SwitchboardError) {
        guard let components = URLComponents(string: url), let schemeText = components.scheme?.lowercased(),
              let scheme = SocketScheme(rawValue: schemeText) else {
            throw .invalidArgument("not a ws:// or wss:// URL: \(URLRedaction.redacting(url))")
        }
        guard let host = components.host, !host.isEmpty else {
            throw .invalidArgument("URL has no host: \(URLRedaction.redacting(url))")
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
    }
}

extension WebSocketURLEndpoint: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// ``SocketEndpoint/redactedURL`` and the header *names* only: header values (bearer tokens,
    /// cookies) and secret query values (`token=<redacted>`, see ``URLRedaction``) never appear
    /// in descriptions, logs or debugger output.
    public var description: String {
        let names = headers.map(\.name)
        return redactedURL + (names.isEmpty ? "" : " headers: [\(names.joined(separator: ", "))] (values redacted)")
    }

    public var debugDescription: String { "WebSocketURLEndpoint(\(description))" }

    public var customMirror: Mirror {
        Mirror(self, children: ["url": redactedURL, "headerNames": headers.map(\.name)], displayStyle: .struct)
    }
}
