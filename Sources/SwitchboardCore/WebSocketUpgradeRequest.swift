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
