/// The closing-handshake state of a connection (RFC 6455 §7).
public enum WebSocketProtocolState: Equatable, Sendable {
    /// Data may flow both ways.
    case open
    /// The peer's close frame arrived, or the peer violated the protocol, and our close frame
    /// is not written yet. We may still send data (what the application owes for messages it
    /// already received); nothing more is read. ``WebSocketProtocol/writeClose(code:reason:into:using:)``
    /// writes our close frame and completes the handshake.
    case closeReceived
    /// We sent a close frame and are waiting for the peer's.
    case closing
    /// The close handshake completed, the connection failed, or the transport ended.
    case closed
}
