/// Where a subscriber is in a topic's numbered stream of messages: the topic's `epoch` and the
/// `sequence` number of the last message it received (0: none yet).
///
/// Sequence numbers start at 1 and grow by one per message of the topic. The epoch names one
/// unbroken history: it changes whenever the history a subscriber would resume from may have
/// lost messages (the process restarted, the topic was idle long enough to be forgotten, the
/// backplane reported a gap), so a position from another epoch can never be resumed silently.
public struct TopicPosition: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The history this position belongs to (an opaque token, compare for equality only).
    public var epoch: String
    /// The last message received, 0 before the first.
    public var sequence: UInt64

    /// A position in `epoch` after message `sequence`.
    public init(epoch: String, sequence: UInt64) {
        self.epoch = epoch
        self.sequence = sequence
    }

    /// `epoch:sequence`.
    public var description: String { "\(epoch):\(sequence)" }
}

/// Why a subscriber could not be given every message it missed after a ``TopicPosition``.
public enum TopicResumeFailure: String, Sendable, Hashable, Codable {
    /// The position names another history (the server restarted, the topic was forgotten after
    /// being idle, or the backplane reported a possible gap): messages may have been lost.
    case epochChanged = "epoch_changed"
    /// Messages after the position were already dropped from the bounded replay buffer
    /// (too many since, or older than its age limit).
    case bufferExceeded = "buffer_exceeded"
    /// The position is ahead of the newest message: it was never handed out by this history.
    case unknownPosition = "unknown_position"
}
