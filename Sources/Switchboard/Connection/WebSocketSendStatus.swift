/// What ``WebSocketConnection/sendNow(_:compress:)`` did with a message.
///
/// A message that does not fit is not a status but an error (``SwitchboardError`` of kind
/// `.limitExceeded`): see ``WebSocketConfiguration/outboundLimit``.
public enum WebSocketSendStatus: Sendable, Equatable {
    /// Queued; the outbound queue is at or below its high-water mark.
    case queued
    /// Queued, and the outbound queue is now above its high-water mark
    /// (``WebSocketConfiguration/outboundHighWaterMark``): the peer is not keeping up. Stop
    /// producing until the queue drains (a callback route's connection stops reading the peer
    /// meanwhile), or the next `sendNow` fails once the queue passes
    /// ``WebSocketConfiguration/outboundLimit``.
    case backpressure
}
