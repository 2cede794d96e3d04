/// What ``WebSocketServerHandshake/classify(_:)`` made of a request head.
public enum WebSocketRequestKind: Sendable, Equatable {
    /// A valid WebSocket upgrade request; answer with
    /// ``WebSocketServerHandshake/acceptResponse(for:subprotocol:deflate:extraHeaders:)`` or reject it.
    case upgrade(WebSocketUpgradeRequest)
    /// A request without an `Upgrade` field: an ordinary HTTP request (health check, metrics,
    /// …) that a router may answer with ``HTTPResponse``.
    case plainHTTP(HTTPRequestHead)
}
