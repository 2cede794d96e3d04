import SwitchboardCore

/// Numbered topics with a bounded replay buffer, so that a subscriber that lost its connection
/// can resume where it was: ``WebSocketServer/subscribe(_:to:resumingAfter:announce:)``.
///
/// Set ``WebSocketServerConfiguration/topicReplay`` to enable it (it is off by default: then
/// topics keep nothing). Each topic then numbers its messages 1, 2, 3… within an epoch (see
/// SwitchboardCore's `TopicPosition`) and keeps the most recent ones, bounded by count, bytes and age. A
/// topic's history costs nothing until its first publish or resumable subscription, and is
/// forgotten once it has no subscriber and every message has aged out (a periodic sweep, every
/// ``maxAge``, checks).
///
/// Subscribers must learn each message's position to resume from it: ``stamp`` puts it into the
/// message (once per publish, not per subscriber), for example as a JSON member.
///
/// Memory: each kept message holds its payload twice (the payload and its serialized frame,
/// shared with the deliveries in flight, plus the compressed frame when subscribers compress it)
/// and about 300 bytes of bookkeeping. At the defaults a busy topic keeps at most 100 messages
/// and 256 KiB of payload: measured (`Benchmarks`' `replay-memory`), 48 KiB of heap for 100
/// messages of 100 bytes, 224 KiB for 100 of 1,000 bytes, and 518 KiB at most (the byte limit).
public struct TopicReplayConfiguration: Sendable {
    /// Messages kept per topic at most (default 100).
    public var maxMessages: Int = 100
    /// Payload bytes kept per topic at most (default 256 KiB); the newest message is always
    /// kept, even when larger.
    public var maxBytes: Int = 256 * 1024
    /// How long a message stays resumable (default 120 s).
    public var maxAge: Duration = .seconds(120)
    /// Puts a message's position into it, called once per publish with the position the message
    /// gets (its sequence number is the position's); nil leaves messages as published. Runs
    /// under the server's topic lock: keep it quick, and never call back into the server. A
    /// text message it returns that is not valid UTF-8 is not published.
    public var stamp: (@Sendable (TopicPosition, WebSocketMessage) -> WebSocketMessage)?

    /// The defaults (100 messages, 256 KiB, 120 s per topic) and `stamp`.
    public init(maxMessages: Int = 100, maxBytes: Int = 256 * 1024, maxAge: Duration = .seconds(120),
                stamp: (@Sendable (TopicPosition, WebSocketMessage) -> WebSocketMessage)? = nil) {
        self.maxMessages = maxMessages
        self.maxBytes = maxBytes
        self.maxAge = maxAge
        self.stamp = stamp
    }

    var limits: TopicReplayLog<TopicPublication>.Limits {
        .init(maxMessages: maxMessages, maxBytes: maxBytes, maxAge: maxAge)
    }
}

/// A subscription made by ``WebSocketServer/subscribe(_:to:resumingAfter:announce:)``: where live
/// delivery starts, and whether what the subscriber missed was sent.
public struct TopicSubscription: Sendable, Equatable {
    /// What happened to the messages published while the subscriber was away.
    public enum Outcome: Sendable, Equatable {
        /// No position was given: live messages from now on.
        case new
        /// Every message after the given position was sent (`count` of them, 0 when none was
        /// missed), before any live one.
        case recovered(count: Int)
        /// Some could not be sent; none of the history was. Tell the subscriber (it must catch
        /// up some other way, from your store, or start over); live messages follow.
        case failed(TopicResumeFailure)
    }

    /// The topic.
    public let topic: String
    /// The position after the last message sent from the history (or, without one sent, the
    /// newest message before live delivery started): live messages follow it, numbered on.
    public let position: TopicPosition
    /// Whether the subscriber got what it missed.
    public let outcome: Outcome
}
