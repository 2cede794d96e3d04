/// What ``WebSocketProtocol/writeClose(code:reason:into:using:)`` did.
public enum WebSocketCloseProgress: Equatable, Sendable {
    /// Our close frame was written first; state ``WebSocketProtocolState/closing``: wait for the
    /// peer's close (and, as a client, for the server to close TCP), at most a timeout.
    case waitingForPeer
    /// Our close frame answered the peer's close (or failed the connection after its protocol
    /// error): the handshake is complete, state ``WebSocketProtocolState/closed``. Close the
    /// transport once the frame is flushed.
    case complete(WebSocketCloseStatus)
    /// Nothing was written: our close frame was already sent, or the connection is closed.
    case alreadySent
}
