import SwitchboardCore

/// Received messages the application has not taken yet: a FIFO with a byte count, high and low
/// water marks, and at most one waiting receiver.
///
/// Not thread-safe: owned by one ``WebSocketConnection`` (its actor isolation protects it).
/// It decides, the connection acts: ``push(_:)`` says when to stop reading the socket and
/// ``pop()`` when to resume.
struct InboundQueue {
    /// Unsafe rather than checked: the checked form costs every waiting task a heap object
    /// (idle memory per connection). The queue resumes it exactly once: `push` and
    /// `resumeWaiter` both take it out of `waiter` before resuming it.
    typealias Waiter = UnsafeContinuation<WebSocketMessage?, Never>

    private var messages = RingBuffer<WebSocketMessage>()
    /// Payload bytes queued.
    private(set) var byteCount = 0
    /// The one task waiting for the next message.
    private var waiter: Waiter?
    let highWaterMark: Int
    let lowWaterMark: Int

    init(highWaterMark: Int, lowWaterMark: Int) {
        self.highWaterMark = max(0, highWaterMark)
        self.lowWaterMark = min(max(0, lowWaterMark), self.highWaterMark)
    }

    var isEmpty: Bool { messages.isEmpty }
    var count: Int { messages.count }
    var hasWaiter: Bool { waiter != nil }
    /// Above the high-water mark: the socket should not be read.
    var isFull: Bool { byteCount > highWaterMark }

    /// Where ``push(_:)`` put a message.
    enum PushResult: Equatable {
        /// Handed straight to the waiting receiver.
        case handedToReceiver
        /// Queued; the queue is at or below its high-water mark.
        case queued
        /// Queued; the queue is now above its high-water mark: stop reading the socket.
        case full
    }

    /// Hands `message` to the waiting receiver, or queues it.
    mutating func push(_ message: WebSocketMessage) -> PushResult {
        if let w = waiter, messages.isEmpty {
            waiter = nil
            w.resume(returning: message)
            return .handedToReceiver
        }
        messages.append(message)
        byteCount += message.payloadCount
        return isFull ? .full : .queued
    }

    /// The next queued message, and whether reading may resume (the queue went from above the
    /// low-water mark to at or below it).
    mutating func pop() -> (message: WebSocketMessage, resumeReading: Bool)? {
        guard let m = messages.popFirst() else { return nil }
        let before = byteCount
        byteCount -= m.payloadCount
        return (m, before > lowWaterMark && byteCount <= lowWaterMark)
    }

    /// Registers the receiver to resume with the next message. Refused (returns false, `waiter`
    /// untouched) when another receiver already waits: two tasks receiving from one connection
    /// would each get an arbitrary half of the messages.
    mutating func wait(_ w: Waiter) -> Bool {
        guard waiter == nil else { return false }
        waiter = w
        return true
    }

    /// Resumes the waiting receiver with nil (end of messages, or its task was cancelled).
    mutating func resumeWaiter() {
        guard let w = waiter else { return }
        waiter = nil
        w.resume(returning: nil)
    }

    /// Drops every queued message (after a fatal error in the consumer, e.g. a line too long).
    mutating func removeAll() {
        messages.removeAll()
        byteCount = 0
    }
}
