/// A complete data message (RFC 6455 §5.6), reassembled from its fragments.
public enum WebSocketMessage: Equatable, Sendable {
    /// A text message; the bytes are guaranteed to be valid UTF-8 when produced by
    /// ``WebSocketProtocol``.
    case text([UInt8])
    /// A binary message.
    case binary([UInt8])
}
