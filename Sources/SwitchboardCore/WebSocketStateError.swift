/// Why a send on ``WebSocketProtocol`` was refused. These are caller errors, not peer errors:
/// nothing is written and the connection state is unchanged.
public enum WebSocketStateError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The connection is not open: we already sent a close frame, or it is closed (§5.5.1:
    /// nothing may be sent after a close frame).
    case notOpen
    /// An argument violates RFC 6455: a control payload over 125 bytes, a close code that must
    /// not be sent (1005, 1006, 1015, unassigned), an opcode other than text/binary for a
    /// message, or text that is not valid UTF-8.
    case invalidArgument

    /// A short English explanation.
    public var description: String {
        switch self {
        case .notOpen: return "the WebSocket connection is not open"
        case .invalidArgument: return "invalid argument for a WebSocket frame"
        }
    }
}
