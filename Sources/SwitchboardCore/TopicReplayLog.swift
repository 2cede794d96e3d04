/// One topic's numbered, bounded history: the messages published to it recently, kept so a
/// subscriber that lost its connection can be given exactly what it missed.
///
/// Pure: the caller passes the time (`now`) and the epoch token, so every rule is testable
/// without a clock or randomness. Bounded three ways, each checked on every append:
/// ``Limits/maxMessages``, ``Limits/maxBytes`` (what each element says it costs) and
/// ``Limits/maxAge`` (also applied by ``expire(now:)``).
///
/// ```swift
/// var log = TopicReplayLog<String>(epoch: "e1", limits: .init(maxMessages: 2, maxBytes: 1 << 20, maxAge: .seconds(60)))
/// log.append("a", bytes: 1, now: t)                       // sequence 1
/// log.append("b", bytes: 1, now: t)                       // sequence 2
/// log.replay(after: TopicPosition(epoch: "e1", sequence: 1), now: t)   // .recovered(["b"])
/// ```
public struct TopicReplayLog<Element> {
    /// How much history a topic keeps.
    public struct Limits: Sendable, Hashable {
        /// Messages kept at most (at least 1).
        public var maxMessages: Int
        /// Bytes kept at most, as given to ``TopicReplayLog/append(_:bytes:now:)``; the newest
        /// message is always kept, even when larger.
        public var maxBytes: Int
        /// Messages older than this are dropped.
        public var maxAge: Duration

        /// Keeps at most `maxMessages` messages, `maxBytes` bytes, for `maxAge`.
        public init(maxMessages: Int, maxBytes: Int, maxAge: Duration) {
            self.maxMessages = max(1, maxMessages)
            self.maxBytes = max(0, maxBytes)
            self.maxAge = maxAge
        }
    }

    /// What ``TopicReplayLog/replay(after:now:)`` found.
    public enum Replay {
        /// Every message after the position, oldest first (empty: nothing was missed).
        case recovered([Element])
        /// Some messages after the position are gone, or the position is not from this history.
        case failed(TopicResumeFailure)
    }

    private struct Entry {
        let sequence: UInt64
        let time: ContinuousClock.Instant
        let bytes: Int
        /// Nil once dropped (released at once, not when the prefix is compacted).
        var element: Element?
    }

    /// The current history's name (see ``TopicPosition/epoch``).
    public private(set) var epoch: String
    /// The newest message's sequence number (0 before the first).
    public private(set) var lastSequence: UInt64 = 0
    /// The bounds.
    public let limits: Limits
    /// Entries from `head` on are live; the prefix is compacted away now and then.
    private var entries: [Entry] = []
    private var head = 0
    /// Bytes of the live entries.
    public private(set) var bytes = 0

    /// An empty history named `epoch`, bounded by `limits`.
    public init(epoch: String, limits: Limits) {
        self.epoch = epoch
        self.limits = limits
    }

    /// Messages kept now.
    public var count: Int { entries.count - head }
    /// Whether no message is kept.
    public var isEmpty: Bool { count == 0 }
    /// Where a subscriber that has received everything so far stands.
    public var position: TopicPosition { TopicPosition(epoch: epoch, sequence: lastSequence) }

    /// Numbers and keeps `element` (costing `bytes`), dropping the oldest messages beyond the
    /// limits. Returns its sequence number.
    @discardableResult
    public mutating func append(_ element: Element, bytes: Int, now: ContinuousClock.Instant) -> UInt64 {
        lastSequence &+= 1
        entries.append(Entry(sequence: lastSequence, time: now, bytes: max(0, bytes), element: element))
        self.bytes += max(0, bytes)
        while count > limits.maxMessages || (self.bytes > limits.maxBytes && count > 1) {
            dropOldest()
        }
        expire(now: now)
        return lastSequence
    }

    /// Drops the messages older than ``Limits/maxAge``.
    public mutating func expire(now: ContinuousClock.Instant) {
        while head < entries.count, now - entries[head].time > limits.maxAge {
            dropOldest()
        }
    }

    /// Everything after `position`, oldest first, or why that cannot be given. Messages past
    /// their age are not given (they count as dropped).
    public func replay(after position: TopicPosition, now: ContinuousClock.Instant) -> Replay {
        guard position.epoch == epoch else { return .failed(.epochChanged) }
        guard position.sequence <= lastSequence else { return .failed(.unknownPosition) }
        if position.sequence == lastSequence { return .recovered([]) }
        // The first message wanted, position.sequence + 1, must still be kept and young enough.
        var first = head
        while first < entries.count, now - entries[first].time > limits.maxAge { first += 1 }
        guard first < entries.count, entries[first].sequence <= position.sequence + 1 else {
            return .failed(.bufferExceeded)
        }
        let start = first + Int(position.sequence + 1 - entries[first].sequence)
        return .recovered(entries[start...].compactMap(\.element))
    }

    /// Starts a new history named `epoch`: the kept messages are dropped, and every position of
    /// the old history fails to resume with ``TopicResumeFailure/epochChanged``. Sequence
    /// numbers go on from where they were.
    public mutating func restart(epoch: String) {
        self.epoch = epoch
        entries = []
        head = 0
        bytes = 0
    }

    private mutating func dropOldest() {
        bytes -= entries[head].bytes
        entries[head].element = nil
        head += 1
        if head == entries.count {
            entries.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 32 && head * 2 >= entries.count {
            entries.removeFirst(head)
            head = 0
        }
    }
}
