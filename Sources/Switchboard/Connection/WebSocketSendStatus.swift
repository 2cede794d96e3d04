/// What ``WebSocketConnection/sendNow(_:)`` did with a message.
///
/// A message that does not fit is not a status but an error (``SwitchboardError`` of kind
/// `.limitExceeded`): see ``WebSocketConfiguration/outboundLimit``.
public enum WebSocketSendStatus: Sendable, Equatable {
    /// Queued; the outbound queue is at or below its high-water mark.
    case queued
    /// Queued, and the outbound queue is now above its high-water mark
    /// (``WebSocketConfiguration/outboundHighWaterMark``): the connection has stopped reading
    /// the peer until the queue drains. Stop producing until then, or the next sends fail once
    /// the queue passes ``WebSocketConfiguration/outboundLimit``.
    case backpressure
}
