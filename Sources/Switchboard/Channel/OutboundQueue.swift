/// The bytes waiting for one socket, in order, plus at most one pong and at most one payload
/// held by reference (no I/O: the writer is passed in, so every rule here is unit-testable).
///
/// - Writers append whole frames (or a whole HTTP response), so every append ends on a frame
///   boundary.
/// - A pong can wait in its own slot, placed at the frame boundary where it was queued. A newer
///   pong replaces a pong not yet started (RFC 6455 §5.5.3: answering only the most recent ping
///   is allowed), so a peer flooding pings occupies one pong's worth of memory here, however
///   many pings it sends. (The channel uses the slot while the socket is blocked; otherwise it
///   appends pongs like any frame, so that every ping is answered.)
/// - A large payload whose header was just appended can be queued by reference
///   (``appendReference(_:)``): it is written from the caller's array, after everything queued
///   before it, and never copied — unless more is queued behind it, which first copies it in.
/// - Storage is released once everything has been written: an idle connection holds no buffer.
/// - Storage is bounded by what is unwritten, not by what was ever sent: the written prefix is
///   dropped (the unwritten rest moved to the front) by an append that finds it at least as
///   large as the rest, so a queue that never empties (a producer woken at the low-water mark
///   keeps it non-empty) holds at most about twice its unwritten bytes plus the frame being
///   appended. Each byte is moved at most once per byte written before it, so this costs O(1)
///   per byte; a queue written to empty at each flush (the fast path) never moves anything.
struct OutboundQueue {
    /// Queued bytes; `bytes[..<offset]` are already written.
    private var bytes: [UInt8] = []
    private var offset = 0
    /// The pong waiting in its slot (empty: none), and the index in `bytes` it goes before.
    private var pong: [UInt8] = []
    private var pongAt = 0
    /// A payload written after all of `bytes` (and the pong), from the caller's storage;
    /// `tail[..<tailOffset]` already written.
    private var tail: [UInt8] = []
    private var tailOffset = 0

    /// Bytes not yet written (the pong and the payload held by reference included).
    var count: Int { bytes.count - offset + pong.count + tail.count - tailOffset }
    var isEmpty: Bool { count == 0 }
    /// Whether a pong waits in its slot (not yet started).
    var holdsPong: Bool { !pong.isEmpty }
    /// Bytes of storage held (written or not): what the queue costs in memory.
    var storageCapacity: Int { bytes.capacity + pong.capacity }

    /// Appends whole frames written by `body` directly into the queue's storage.
    mutating func append<E: Error>(_ body: (inout [UInt8]) throws(E) -> Void) throws(E) {
        materializeTail()
        compactIfMostlyWritten()
        try body(&bytes)
    }

    /// Appends `array` (whole frames or a whole HTTP response). An empty queue takes the
    /// array's storage as its own instead of copying it (the caller's array is usually dropped
    /// right after, leaving the storage to the queue alone).
    mutating func append(adopting array: [UInt8]) {
        guard bytes.isEmpty, tail.isEmpty, pong.isEmpty, !array.isEmpty else {
            array.withUnsafeBytes { append($0) }
            return
        }
        bytes = array
        offset = 0
    }

    mutating func append(_ raw: UnsafeRawBufferPointer) {
        materializeTail()
        compactIfMostlyWritten()
        raw.withMemoryRebound(to: UInt8.self) { bytes.append(contentsOf: $0) }
    }

    /// Drops the written prefix of `bytes` once it is at least as large as the unwritten rest,
    /// moving the rest (no more bytes than were written since the last move) to the front of
    /// the same storage. Called before appending, the only time the storage grows.
    @inline(__always)
    private mutating func compactIfMostlyWritten() {
        guard offset > 0, offset >= bytes.count - offset else { return }
        bytes.removeSubrange(0..<offset)
        if !pong.isEmpty { pongAt -= offset }
        offset = 0
    }

    /// Queues `payload` by reference, to be written right after everything queued so far (its
    /// frame header must be the last thing appended).
    mutating func appendReference(_ payload: [UInt8]) {
        materializeTail()
        tail = payload
        tailOffset = 0
    }

    /// Queues a pong frame; returns true when it replaced a pong not yet started.
    @discardableResult
    mutating func setPong(_ frame: [UInt8]) -> Bool {
        guard !frame.isEmpty else { return false }
        materializeTail()
        let replaced = !pong.isEmpty
        if !replaced { pongAt = bytes.count }
        pong = frame
        return replaced
    }

    /// Copies the unwritten rest of the payload held by reference into `bytes`, so that what is
    /// queued next goes after it.
    private mutating func materializeTail() {
        guard !tail.isEmpty else { return }
        compactIfMostlyWritten()
        if tailOffset == 0 {
            bytes += tail
        } else {
            bytes += tail[tailOffset...]
        }
        tail = []
        tailOffset = 0
    }

    /// How a write attempt went: `written(n)` bytes taken (0: the writer is full, the rest must
    /// wait), or `failed` (the writer keeps the error).
    enum WriteOutcome { case written(Int), failed }

    /// How draining ended.
    enum DrainResult: Equatable {
        /// Everything was written; the storage is released.
        case empty
        /// The writer took nothing: wait for writability.
        case blocked
        /// The writer failed.
        case failed
    }

    /// Writes through `write` in order until the queue is empty, the writer is blocked, or it
    /// failed. `write` gets two contiguous pieces of the stream (the second possibly empty), to
    /// write in that order in one call if it can (`sendmsg`); it may take any prefix of them.
    mutating func drain(_ write: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) -> WriteOutcome) -> DrainResult {
        let none = UnsafeRawBufferPointer(start: nil, count: 0)
        while true {
            if !pong.isEmpty && offset == pongAt {
                guard case .written(let n) = pong.withUnsafeBytes({ write($0, none) }) else { return .failed }
                let taken = min(max(n, 0), pong.count)
                if taken == 0 { return .blocked }
                if taken < pong.count {
                    // Started, so it can no longer be replaced: the rest goes first in line.
                    bytes.insert(contentsOf: pong[taken...], at: offset)
                }
                pong = []
                continue
            }
            let end = pong.isEmpty ? bytes.count : pongAt
            let withTail = pong.isEmpty && tailOffset < tail.count
            guard offset < end || withTail else {
                // Nothing left: everything is written.
                bytes = []
                offset = 0
                tail = []
                tailOffset = 0
                return .empty
            }
            let start = offset
            let tailStart = tailOffset
            let outcome = bytes.withUnsafeBytes { raw in
                tail.withUnsafeBytes { rest in
                    write(UnsafeRawBufferPointer(rebasing: raw[start..<end]),
                          withTail ? UnsafeRawBufferPointer(rebasing: rest[tailStart...]) : none)
                }
            }
            guard case .written(let n) = outcome else { return .failed }
            // A partial write is retried at once: only a write that takes nothing means the
            // socket is full (a second try after a partial write usually takes more).
            var taken = max(n, 0)
            if taken == 0 { return .blocked }
            let fromBytes = min(taken, end - start)
            offset += fromBytes
            taken -= fromBytes
            if withTail { tailOffset = min(tail.count, tailOffset + taken) }
        }
    }

    /// Drops everything (the socket closed).
    mutating func removeAll() {
        bytes = []
        offset = 0
        pong = []
        pongAt = 0
        tail = []
        tailOffset = 0
    }
}
