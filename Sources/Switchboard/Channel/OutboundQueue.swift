/// The bytes waiting for one socket, in order, plus at most one pong (no I/O: the writer is
/// passed in, so every rule here is unit-testable).
///
/// - Writers append whole frames (or a whole HTTP response), so every append ends on a frame
///   boundary.
/// - Storage is a list of chunks written front to back. Small frames go into the last chunk
///   while it is under ``chunkSize``; a large payload queued by reference
///   (``appendReference(_:)``) becomes a chunk of its own and is written from the caller's
///   array, never copied; so is a large array queued with ``append(adopting:)``.
/// - A pong can wait in its own slot, placed at the frame boundary where it was queued. A newer
///   pong replaces a pong not yet started (RFC 6455 §5.5.3: answering only the most recent ping
///   is allowed), so a peer flooding pings occupies one pong's worth of memory here, however
///   many pings it sends. (The channel uses the slot while the socket is blocked; otherwise it
///   appends pongs like any frame, so that every ping is answered.)
/// - Storage is bounded by what is unwritten, not by what was ever sent: a chunk is released
///   as soon as it is written. A queue that never empties (a producer woken at the low-water
///   mark keeps it non-empty) holds its unwritten bytes, the written part of the chunk being
///   written, and the spare capacity of the last chunk (under ``chunkSize``, or one frame) —
///   nothing is ever moved or copied to keep it so, and a chunk never grows past
///   ``chunkSize`` by doubling. (A single contiguous array, copying each payload in behind the
///   last, held up to twice the queued bytes: 2 MiB for a connection at its 1 MiB high-water
///   mark.)
/// - Storage is released once everything has been written: an idle connection holds no buffer.
struct OutboundQueue {
    /// Small frames share a chunk until it holds this many bytes; then the next frame starts a
    /// new one.
    static let chunkSize = 64 << 10

    /// The chunk being written; `first[..<offset]` already written. On the fast path (a queue
    /// written to empty at each flush) the only one, and `rest` stays unallocated.
    private var first: [UInt8] = []
    private var offset = 0
    /// The chunks behind `first`, in order, from `restHead` on (`rest[..<restHead]` are spent).
    private var rest: [[UInt8]] = []
    private var restHead = 0
    /// Whether frames may still be appended to the last chunk: false once it is a payload held
    /// by reference, or once a pong was placed behind it.
    private var lastTakesAppends = true
    /// Bytes appended and written since the queue was last empty (the pong not included):
    /// positions in the stream of frames.
    private var appended = 0
    private var written = 0
    /// The pong waiting in its slot (empty: none), and the stream position it goes before
    /// (always the start of a chunk).
    private var pong: [UInt8] = []
    private var pongAt = 0

    /// Bytes not yet written (the pong included).
    var count: Int { appended - written + pong.count }
    var isEmpty: Bool { count == 0 }
    /// Whether a pong waits in its slot (not yet started).
    var holdsPong: Bool { !pong.isEmpty }
    /// Bytes of storage held (written or not, payloads held by reference included): what the
    /// queue costs in memory.
    var storageCapacity: Int {
        var total = first.capacity + pong.capacity
        for i in restHead..<rest.count { total += rest[i].capacity }
        return total
    }

    /// Appends whole frames written by `body` directly into the queue's storage.
    mutating func append<E: Error>(_ body: (inout [UInt8]) throws(E) -> Void) throws(E) {
        if rest.count > restHead {
            if !lastTakesAppends || Self.isFull(rest[rest.count - 1]) { startChunk(after: rest[rest.count - 1]) }
        } else if !lastTakesAppends || Self.isFull(first) {
            startChunk(after: first)
        }
        // The last chunk: `first` only while nothing is queued behind it.
        if rest.count > restHead {
            let before = rest[rest.count - 1].count
            defer { appended += rest[rest.count - 1].count - before }
            try body(&rest[rest.count - 1])
        } else {
            let before = first.count
            defer { appended += first.count - before }
            try body(&first)
        }
    }

    /// Whether small frames no longer go into `chunk`: it reached ``chunkSize``, or its storage
    /// is that large and nearly used up (the next frame would make it grow, by doubling).
    @inline(__always)
    private static func isFull(_ chunk: [UInt8]) -> Bool {
        chunk.count >= chunkSize || (chunk.capacity >= chunkSize && chunk.capacity - chunk.count < chunkSpare)
    }

    /// Room left in a chunk below which a new one is started (see ``isFull(_:)``).
    static let chunkSpare = 1 << 10

    /// Appends `array` (whole frames or a whole HTTP response) without copying it when it can:
    /// an empty queue takes the array's storage as its own, and so does a queue holding
    /// something when the array is large (a chunk of its own); a small one is copied behind
    /// the rest. (The caller's array is usually dropped right after, leaving the storage to
    /// the queue alone.)
    mutating func append(adopting array: [UInt8]) {
        guard !array.isEmpty else { return }
        if appended == written && pong.isEmpty {
            dropStorage()
            first = array
            appended = array.count
            return
        }
        guard array.count >= Self.adoptionThreshold else {
            array.withUnsafeBytes { append($0) }
            return
        }
        // Never appended to, like a large copy (see ``append(_:)``): its storage is usually
        // exactly its size, and would double for the next small frame.
        rest.append(array)
        appended += array.count
        lastTakesAppends = false
    }

    /// Arrays at least this large are queued as chunks of their own rather than copied.
    static let adoptionThreshold = 4 << 10

    /// Appends a copy of `raw` (whole frames): behind the last chunk's frames when small, as a
    /// chunk of its own, sized exactly, when large (an append to a chunk doubles its storage
    /// when it runs out).
    mutating func append(_ raw: UnsafeRawBufferPointer) {
        guard raw.count >= Self.adoptionThreshold, appended != written || !pong.isEmpty else {
            append { buffer in raw.withMemoryRebound(to: UInt8.self) { buffer.append(contentsOf: $0) } }
            return
        }
        rest.append(raw.withMemoryRebound(to: UInt8.self) { Array($0) })
        appended += raw.count
        lastTakesAppends = false
    }

    /// Queues `payload` by reference, to be written right after everything queued so far (its
    /// frame header must be the last thing appended).
    mutating func appendReference(_ payload: [UInt8]) {
        guard !payload.isEmpty else { return }
        if appended == written && pong.isEmpty {
            dropStorage()
            first = payload
        } else {
            rest.append(payload)
        }
        appended += payload.count
        lastTakesAppends = false
    }

    /// Queues a pong frame; returns true when it replaced a pong not yet started.
    @discardableResult
    mutating func setPong(_ frame: [UInt8]) -> Bool {
        guard !frame.isEmpty else { return false }
        let replaced = !pong.isEmpty
        if !replaced {
            // Where the stream is now: what is appended from here on starts a new chunk, so
            // the pong always sits between two chunks.
            pongAt = appended
            lastTakesAppends = false
        }
        pong = frame
        return replaced
    }

    /// Opens a new last chunk for appends, behind `previous`. After a chunk of small frames
    /// filled up (a burst), the new one gets ``chunkSize`` of storage at once, so that it fills
    /// without reallocating; after a payload by reference or a pong (one frame's header, a ping
    /// or a close frame usually follows) it starts small.
    private mutating func startChunk(after previous: [UInt8]) {
        var chunk: [UInt8] = []
        if lastTakesAppends && previous.count >= Self.chunkSize - Self.chunkSpare {
            chunk.reserveCapacity(Self.chunkSize)
        }
        rest.append(chunk)
        lastTakesAppends = true
    }

    /// Releases the storage of an empty queue (everything written, no pong).
    private mutating func dropStorage() {
        first = []
        offset = 0
        if !rest.isEmpty { rest = [] }
        restHead = 0
        appended = 0
        written = 0
        lastTakesAppends = true
    }

    /// Moves to the next chunk once `first` is written; false when there is none.
    private mutating func advance() -> Bool {
        guard restHead < rest.count else { return false }
        first = []
        swap(&first, &rest[restHead])
        offset = 0
        restHead += 1
        if restHead == rest.count {
            rest = []
            restHead = 0
        } else if restHead >= 32 && restHead * 2 >= rest.count {
            // Spent entries are empty arrays; dropping them keeps the list's storage bounded
            // by the chunks still queued (each entry moved at most once per entry spent).
            rest.removeFirst(restHead)
            restHead = 0
        }
        return true
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
            let pongDue = !pong.isEmpty && written == pongAt
            if offset == first.count && !pongDue {
                // `first` is written: on to the next chunk; none left (the pong is due
                // whenever one waits: every byte before it is written), the queue is empty.
                if advance() { continue }
                dropStorage()
                return .empty
            }
            if pongDue {
                guard case .written(let n) = pong.withUnsafeBytes({ write($0, none) }) else { return .failed }
                let taken = min(max(n, 0), pong.count)
                if taken == 0 { return .blocked }
                if taken < pong.count {
                    // Started, so it can no longer be replaced: the rest goes first in line, as
                    // the chunk being written (the one before it is written through: the pong
                    // sits between two chunks).
                    swap(&first, &pong)
                    offset = taken
                    appended += first.count
                    written += taken
                }
                pong = []
                continue
            }
            // `first[offset...]`, and the next chunk unless the pong goes between them.
            let start = offset
            let pongNext = !pong.isEmpty && written + (first.count - start) == pongAt
            let withNext = !pongNext && restHead < rest.count
            let outcome = first.withUnsafeBytes { raw in
                if withNext {
                    return rest[restHead].withUnsafeBytes { next in
                        write(UnsafeRawBufferPointer(rebasing: raw[start...]), next)
                    }
                }
                return write(UnsafeRawBufferPointer(rebasing: raw[start...]), none)
            }
            guard case .written(let n) = outcome else { return .failed }
            // A partial write is retried at once: only a write that takes nothing means the
            // socket is full (a second try after a partial write usually takes more).
            var taken = max(n, 0)
            if taken == 0 { return .blocked }
            let fromFirst = min(taken, first.count - start)
            offset += fromFirst
            written += fromFirst
            taken -= fromFirst
            if taken > 0 && withNext {
                _ = advance()
                let fromNext = min(taken, first.count)
                offset = fromNext
                written += fromNext
            }
        }
    }

    /// Drops everything (the socket closed).
    mutating func removeAll() {
        dropStorage()
        pong = []
        pongAt = 0
    }
}
