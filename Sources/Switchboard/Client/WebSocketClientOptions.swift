import SwitchboardCore

/// Everything needed to open one client connection (what a ``SocketEndpoint`` resolves to).
struct WebSocketClientOptions: Sendable {
    var host: String
    var port: Int
    var useTLS: Bool
    /// Request target: path plus optional `?query`, already percent-encoded.
    var target: String
    var headers: [(String, String)]
    var subprotocols: [String]
    var origin: String?
    var tls: TLSConfiguration
    var connectTimeout: Duration
    var configuration: WebSocketConfiguration
    /// The HTTP proxy to tunnel through; nil: connect directly.
    var proxy: HTTPProxyServer? = nil

    /// Host header value: brackets for IPv6 literals, port only when not the scheme default.
    var hostHeader: String {
        let h = host.contains(":") ? "[\(host)]" : host
        let defaultPort = useTLS ? 443 : 80
        return port == defaultPort ? h : "\(h):\(port)"
    }
}

extension WebSocketClientOptions {
    /// The URL for logs: secret-looking query values replaced (``URLRedaction``); headers,
    /// where bearer tokens travel, are never logged.
    var redactedURL: String {
        URLRedaction.redacting("\(useTLS ? "wss" : "ws")://\(hostHeader)\(target)")
    }
}
