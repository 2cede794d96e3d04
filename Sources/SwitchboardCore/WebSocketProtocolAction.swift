/// What the caller of ``WebSocketProtocol/nextAction(in:offset:using:)`` must do next.
public enum WebSocketProtocolAction: Equatable, Sendable {
    /// A complete data message arrived.
    case message(WebSocketMessage)
    /// Bytes to write to the transport, in order with every other `.write`: an automatic pong,
    /// a close reply, or the close frame sent when the connection fails.
    case write([UInt8])
    /// A ping arrived (informational). The pong, when one is due, was already returned as a
    /// `.write` just before.
    case ping([UInt8])
    /// A pong arrived. Unsolicited pongs are allowed (§5.5.3); the I/O layer matches pongs to
    /// its keepalive pings.
    case pong([UInt8])
    /// The peer's close frame arrived (informational). Our reply, if any, was already returned
    /// as a `.write`.
    case peerClosed(WebSocketCloseStatus)
    /// Terminal: the close handshake is complete or the connection failed. Flush pending writes,
    /// then close the TCP connection (a server at once; a client after briefly waiting for the
    /// server to close first, §7.1.1). Nothing follows this action.
    case closeTransport(WebSocketCloseStatus)
}
