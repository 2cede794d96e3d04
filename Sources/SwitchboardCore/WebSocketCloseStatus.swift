/// How a connection ended, or how the peer asked to end it (RFC 6455 §7.1.5, §7.1.6).
public struct WebSocketCloseStatus: Equatable, Sendable {
    /// The close code: the peer's code; 1005 if the peer's close frame had none; 1006 if the
    /// connection closed without a close handshake; our code when we failed the connection.
    public var code: WebSocketCloseCode
    /// The close reason (valid UTF-8 by construction; empty if none).
    public var reason: String
    /// Non-nil when we failed the connection because the peer broke the protocol.
    public var error: WebSocketProtocolError?

    /// Creates a status from a close code, a reason and the protocol error that caused it, if any.
    public init(code: WebSocketCloseCode, reason: String = "", error: WebSocketProtocolError? = nil) {
        self.code = code
        self.reason = reason
        self.error = error
    }
}
