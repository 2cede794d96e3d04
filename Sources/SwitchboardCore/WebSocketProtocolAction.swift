/// What the caller of ``WebSocketProtocol/nextAction(in:offset:using:)`` must do next.
public enum WebSocketProtocolAction: Equatable, Sendable {
    /// A complete data message arrived.
    case message(WebSocketMessage)
    /// A ping arrived: write this pong frame (already serialized, masked for a client). §5.5.3
    /// lets an endpoint answer only the most recent ping, so an outbound queue may replace a
    /// pong it has not written yet with this one.
    case sendPong([UInt8])
    /// A pong arrived. Unsolicited pongs are allowed (§5.5.3); the I/O layer matches pongs to
    /// its keepalive pings.
    case pong([UInt8])
    /// The peer's close frame arrived. If we had not sent ours, the state is now
    /// ``WebSocketProtocolState/closeReceived``: send what is still owed, then write the reply
    /// with ``WebSocketProtocol/writeClose(code:reason:into:using:)``. If we had, the handshake
    /// is complete and `.closeTransport` follows.
    case peerClosed(WebSocketCloseStatus)
    /// The peer violated the protocol (``WebSocketCloseStatus/error`` says how) while the
    /// connection was open; the state is now ``WebSocketProtocolState/closeReceived`` and later
    /// input is discarded. Failing is also a close: send what is still owed, then write the
    /// close frame (carrying the error's code) with
    /// ``WebSocketProtocol/writeClose(code:reason:into:using:)``.
    case failed(WebSocketCloseStatus)
    /// Terminal: the close handshake completed after we closed first, or the peer violated the
    /// protocol after we sent our close. Flush pending writes, then close the TCP connection (a
    /// server at once; a client after briefly waiting for the server to close first, §7.1.1).
    /// Nothing follows this action.
    case closeTransport(WebSocketCloseStatus)
}
