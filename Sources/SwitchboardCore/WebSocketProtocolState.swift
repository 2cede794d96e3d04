/// The closing-handshake state of a connection (RFC 6455 §7).
public enum WebSocketProtocolState: Equatable, Sendable {
    /// Data may flow both ways.
    case open
    /// We sent a close frame and are waiting for the peer's.
    case closing
    /// The close handshake completed, the connection failed, or the transport ended.
    case closed
}
