/// A request head that passed ``WebSocketServerHandshake/classify(_:)`` (RFC 6455 §4.2.1),
/// with the handshake fields already extracted.
public struct WebSocketUpgradeRequest: Sendable, Equatable {
    /// The full request head.
    public var head: HTTPRequestHead
    /// `Sec-WebSocket-Key` as sent (trimmed), base64 of 16 bytes.
    public var key: String
    /// Offered subprotocols (`Sec-WebSocket-Protocol`, all fields), in order, case preserved.
    public var subprotocols: [String]
    /// The `Origin` value, if any. Browsers always send it; check it against an allow-list to
    /// stop cross-site WebSocket hijacking (RFC 6455 §10.2).
    public var origin: String?
    /// The client's certificate, when the server requests or requires one (mutual TLS) and the
    /// client presented one that was verified against the configured CAs; nil otherwise
    /// (plain `ws`, or no certificate requested or presented). Set by the server before
    /// `authenticate` runs: check ``TLSPeerCertificate/subject`` or its alternative names there.
    public var clientCertificate: TLSPeerCertificate?
    /// The peer's IP address without its port, as text (`203.0.113.7`, `2001:db8::1`); set by the
    /// server before `authenticate` runs (nil in requests made by hand). Behind a reverse proxy
    /// this is the proxy's address: what the proxy says of the client (`X-Forwarded-For`,
    /// `Forwarded`) is in ``headers``, to be trusted only from a known proxy.
    public var remoteAddress: String?

    /// Creates an upgrade request from a head and its extracted handshake fields. Normally made
    /// by ``WebSocketServerHandshake/classify(_:)``, which validates them; this initializer does not.
    public init(head: HTTPRequestHead, key: String, subprotocols: [String] = [], origin: String? = nil) {
        self.head = head
        self.key = key
        self.subprotocols = subprotocols
        self.origin = origin
    }

    /// The `Host` value.
    public var host: String { head.headers["Host"] ?? "" }
    /// The request path, without query, not percent-decoded (``HTTPRequestHead/path``).
    public var path: String { head.path }
    /// The percent-decoded query items (``HTTPRequestHead/queryItems``).
    public var queryItems: [(name: String, value: String)] { head.queryItems }
    /// The request header fields.
    public var headers: HTTPHeaders { head.headers }
}
