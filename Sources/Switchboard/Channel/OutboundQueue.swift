/// The bytes waiting for one socket, in order, plus at most one pong (no I/O: the writer is
/// passed in, so every rule here is unit-testable).
///
/// - Writers append whole frames (or a whole HTTP response), so every append ends on a frame
///   boundary.
/// - A pong can wait in its own slot, placed at the frame boundary where it was queued. A newer
///   pong replaces a pong not yet started (RFC 6455 §5.5.3: answering only the most recent ping
///   is allowed), so a peer flooding pings occupies one pong's worth of memory here, however
///   many pings it sends. (The channel uses the slot while the socket is blocked; otherwise it
///   appends pongs like any frame, so that every ping is answered.)
/// - Storage is released once everything has been written: an idle connection holds no buffer.
struct OutboundQueue {
    /// Queued bytes; `bytes[..<offset]` are already written.
    private var bytes: [UInt8] = []
    private var offset = 0
    /// The pong waiting in its slot (empty: none), and the index in `bytes` it goes before.
    private var pong: [UInt8] = []
    private var pongAt = 0

    /// Bytes not yet written (the pong included).
    var count: Int { bytes.count - offset + pong.count }
    var isEmpty: Bool { count == 0 }
    /// Whether a pong waits in its slot (not yet started).
    var holdsPong: Bool { !pong.isEmpty }

    /// Appends whole frames written by `body` directly into the queue's storage.
    mutating func append<E: Error>(_ body: (inout [UInt8]) throws(E) -> Void) throws(E) {
        try body(&bytes)
    }

    mutating func append(_ raw: UnsafeRawBufferPointer) {
        raw.withMemoryRebound(to: UInt8.self) { bytes.append(contentsOf: $0) }
    }

    /// Queues a pong frame; returns true when it replaced a pong not yet started.
    @discardableResult
    mutating func setPong(_ frame: [UInt8]) -> Bool {
        guard !frame.isEmpty else { return false }
        let replaced = !pong.isEmpty
        if !replaced { pongAt = bytes.count }
        pong = frame
        return replaced
    }

    /// How a write attempt went: `written(n)` bytes taken (fewer than offered means the rest
    /// must wait), or `failed` (the writer keeps the error).
    enum WriteOutcome { case written(Int), failed }

    /// How draining ended.
    enum DrainResult: Equatable {
        /// Everything was written; the storage is released.
        case empty
        /// The writer took less than offered: wait for writability.
        case blocked
        /// The writer failed.
        case failed
    }

    /// Writes through `write` in order until the queue is empty, the writer is blocked, or it
    /// failed. Writes at most two contiguous pieces before and after the pong slot.
    mutating func drain(_ write: (UnsafeRawBufferPointer) -> WriteOutcome) -> DrainResult {
        while true {
            if !pong.isEmpty && offset == pongAt {
                guard case .written(let n) = pong.withUnsafeBytes(write) else { return .failed }
                let taken = min(max(n, 0), pong.count)
                if taken == 0 { return .blocked }
                if taken < pong.count {
                    // Started, so it can no longer be replaced: the rest goes first in line.
                    bytes.insert(contentsOf: pong[taken...], at: offset)
                    pong = []
                    return .blocked
                }
                pong = []
                continue
            }
            let end = pong.isEmpty ? bytes.count : pongAt
            guard offset < end else {
                // Nothing before the pong slot and no pong: everything is written.
                bytes = []
                offset = 0
                return .empty
            }
            let start = offset
            let outcome = bytes.withUnsafeBytes { raw in write(UnsafeRawBufferPointer(rebasing: raw[start..<end])) }
            switch outcome {
            case .failed: return .failed
            case .written(let n):
                let taken = min(max(n, 0), end - start)
                offset += taken
                if taken < end - start { return .blocked }
            }
        }
    }

    /// Drops everything (the socket closed).
    mutating func removeAll() {
        bytes = []
        offset = 0
        pong = []
        pongAt = 0
    }
}
