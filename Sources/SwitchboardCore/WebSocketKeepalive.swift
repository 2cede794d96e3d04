/// Keepalive pings as a pure state machine: the caller owns one timer and the clock, the machine
/// decides when to ping and when the peer is dead (RFC 6455 §5.5.2–5.5.3).
///
/// Time is a monotonic count of nanoseconds chosen by the caller. After ``start(now:)`` and
/// after every ``tick(now:reading:)``, arm the timer for ``nextDeadline`` (nil: nothing to wait for).
///
/// - A ping goes out every `interval`, unless the previous one is still unanswered.
/// - A ping unanswered after `timeout` gives ``Action/timedOut``: the peer is gone. Unless we
///   were not reading the peer then (backpressure: its pong may be waiting unread in our
///   socket): the wait for the pong starts again instead, so a slow but live peer is never
///   taken for a dead one.
/// - A pong whose payload matches the outstanding ping answers it (its round-trip time is
///   returned); other pongs are unsolicited heartbeats (§5.5.3) and ignored.
///
/// Ping payloads are an 8-byte big-endian counter, so a pong answering an older ping cannot be
/// mistaken for the answer to the current one.
public struct WebSocketKeepalive: Sendable, Equatable {
    /// What the caller must do after ``tick(now:reading:)``.
    public enum Action: Equatable, Sendable {
        /// Write a ping with this payload.
        case sendPing([UInt8])
        /// The outstanding ping went unanswered for `timeout`: fail the connection.
        case timedOut
    }

    /// Nanoseconds between pings.
    public let interval: UInt64
    /// Nanoseconds a ping may go unanswered.
    public let timeout: UInt64

    private var nextPingAt: UInt64?
    /// The ping waiting for its pong: payload, when it was sent (for the round-trip time), and
    /// when its pong is due.
    private var outstanding: (payload: [UInt8], sentAt: UInt64, pongDue: UInt64)?
    private var counter: UInt64 = 0

    /// - Parameters:
    ///   - interval: time between pings, in nanoseconds (at least 1).
    ///   - timeout: how long a ping may go unanswered, in nanoseconds (at least 1).
    public init(interval: UInt64, timeout: UInt64) {
        self.interval = max(1, interval)
        self.timeout = max(1, timeout)
    }

    /// Equal when both have the same settings and the same state (next ping, outstanding ping, counter).
    public static func == (a: Self, b: Self) -> Bool {
        a.interval == b.interval && a.timeout == b.timeout && a.nextPingAt == b.nextPingAt
            && a.outstanding?.payload == b.outstanding?.payload && a.outstanding?.sentAt == b.outstanding?.sentAt
            && a.outstanding?.pongDue == b.outstanding?.pongDue
            && a.counter == b.counter
    }

    /// Starts the schedule: the first ping is due `interval` from `now`.
    public mutating func start(now: UInt64) {
        nextPingAt = now &+ interval
    }

    /// Stops everything (the connection is closing): ``nextDeadline`` becomes nil.
    public mutating func stop() {
        nextPingAt = nil
        outstanding = nil
    }

    /// When the caller must call ``tick(now:reading:)`` next, or nil when nothing is scheduled.
    public var nextDeadline: UInt64? {
        guard let nextPingAt else { return nil }
        if let outstanding { return min(nextPingAt, outstanding.pongDue) }
        return nextPingAt
    }

    /// Whether a ping is waiting for its pong.
    public var isAwaitingPong: Bool { outstanding != nil }

    /// Advances to `now`: returns the action due, if any. Call when the timer fires (early or
    /// late calls are fine: nothing is due before its deadline).
    ///
    /// - Parameter now: the current time, in nanoseconds of the caller's monotonic clock.
    /// - Parameter reading: whether the caller is reading the peer's frames at this moment.
    ///   When it is not, an overdue pong restarts its wait instead of timing out.
    public mutating func tick(now: UInt64, reading: Bool = true) -> Action? {
        guard let due = nextPingAt else { return nil }
        if let ping = outstanding, now >= ping.pongDue {
            guard reading else {
                outstanding?.pongDue = now &+ timeout
                return nil
            }
            stop()
            return .timedOut
        }
        guard now >= due else { return nil }
        nextPingAt = now &+ interval
        guard outstanding == nil else { return nil }
        counter &+= 1
        let payload = withUnsafeBytes(of: counter.bigEndian) { Array($0) }
        outstanding = (payload, now, now &+ timeout)
        return .sendPing(payload)
    }

    /// A pong arrived: returns the round-trip time in nanoseconds if it answers the outstanding
    /// ping, nil otherwise (unsolicited or stale).
    public mutating func receivedPong(_ payload: [UInt8], now: UInt64) -> UInt64? {
        guard let ping = outstanding, ping.payload == payload else { return nil }
        outstanding = nil
        return now &- ping.sentAt
    }
}
