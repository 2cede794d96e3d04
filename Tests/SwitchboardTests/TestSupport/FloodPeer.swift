#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation

/// A hand-written WebSocket client for flood tests, over a non-blocking socket: it upgrades, then
/// writes masked frames without ever reading (``flood(cap:stopAbove:stallWindow:next:sample:)``),
/// and afterwards drains what the server sent, frame by frame, while it finishes writing
/// (``pump(sample:until:)``). Blocking (it waits in `poll`): use it on a thread of its own
/// (``onServerTestThread(_:)``).
final class FloodPeer {
    typealias Failure = RawSocketFailure

    /// One frame from the server; `payload` is valid only during the call it is passed to.
    struct Frame {
        var fin: Bool
        var opcode: UInt8
        var payload: UnsafeRawBufferPointer
        var closeCode: Int? { closeFrameCode(opcode: opcode, payload: payload) }
    }

    enum FloodEnd: String {
        /// The socket stayed unwritable for the whole stall window: the server stopped reading.
        case blocked
        /// `cap` bytes were accepted by the kernel.
        case cap
        /// `stopAbove` bytes were accepted: the server kept reading far past any sane bound.
        case stoppedAbove
    }

    struct FloodResult {
        var accepted: Int
        var end: FloodEnd
    }

    private(set) var fd: Int32
    /// Bytes received and not yet parsed.
    private let inbox = ByteQueue()
    /// Whole frames waiting for the socket (everything written outside ``flood``).
    private let outbox = ByteQueue()
    /// The flood chunk being written, and how much of it the kernel took.
    private var chunk: [UInt8] = []
    private var chunkOffset = 0
    /// EOF from the server.
    private(set) var peerClosed = false
    /// Longest ``pump(sample:until:)`` waits without any byte moving in either direction before
    /// it throws: a guard against a stuck server, never reached by a working one.
    let ioStall: Duration

    static let maskingKey: [UInt8] = [0x37, 0xFA, 0x21, 0x3D]

    /// Connects to 127.0.0.1:`port` and upgrades on `path`.
    init(port: Int, path: String, ioStall: Duration) throws {
        self.ioStall = ioStall
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure("socket: errno \(errno)") }
        do { try connectToLoopback(fd, port: port) } catch {
            fd = -1
            throw error
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        outbox.append(Array(ServerRawSocket.upgradeRequest(path: path).utf8))
        var status: String?
        try pump {
            guard let end = self.inbox.find([13, 10, 13, 10]) else { return false }
            let head = String(decoding: self.inbox.readable.prefix(end), as: UTF8.self)
            self.inbox.consume(end + 4)
            status = head.components(separatedBy: "\r\n").first
            return true
        }
        guard let status, status.split(separator: " ").dropFirst().first == "101" else {
            throw Failure("upgrade refused: \(status ?? "?")")
        }
    }

    deinit { close() }

    func close() {
        if fd >= 0 { Glibc.close(fd); fd = -1 }
    }

    // MARK: Frames

    /// A masked client frame.
    static func frame(opcode: UInt8, payload: [UInt8]) -> [UInt8] {
        ServerRawSocket.frame(opcode: opcode, payload: payload)
    }

    /// Queues a whole frame for ``pump(sample:until:)``, after anything queued before it.
    func queue(_ frame: [UInt8]) { outbox.append(frame) }

    // MARK: Flooding

    /// Writes the chunks `next` returns (each made of whole frames), never reading, until the
    /// kernel accepted `cap` bytes, or `stopAbove` bytes (checked between chunks), or the socket
    /// stayed unwritable for `stallWindow`. The window decides only when to give up flooding.
    /// `sample` runs after every MiB accepted and every 100 ms of waiting. A chunk the kernel
    /// took only part of is finished by the next ``pump(sample:until:)``, before the frames it queues.
    func flood(cap: Int, stopAbove: Int, stallWindow: Duration,
               next: () -> [UInt8], sample: () -> Void) throws -> FloodResult {
        var accepted = 0
        var stalledSince: ContinuousClock.Instant?
        var sinceSample = 0
        while true {
            if chunkOffset == chunk.count {
                if accepted >= cap { return FloodResult(accepted: accepted, end: .cap) }
                if accepted >= stopAbove { return FloodResult(accepted: accepted, end: .stoppedAbove) }
                chunk = next()
                chunkOffset = 0
            }
            let n = chunk.withUnsafeBytes {
                send(fd, $0.baseAddress! + chunkOffset, $0.count - chunkOffset, Int32(MSG_NOSIGNAL))
            }
            if n > 0 {
                accepted += n
                chunkOffset += n
                stalledSince = nil
                sinceSample += n
                if sinceSample >= 1 << 20 {
                    sinceSample = 0
                    sample()
                }
                continue
            }
            let e = errno
            if e == EINTR { continue }
            guard e == EAGAIN || e == EWOULDBLOCK else {
                throw Failure("send failed after \(accepted) bytes: errno \(e) (did the server drop the connection?)")
            }
            let start = stalledSince ?? .now
            stalledSince = start
            if ContinuousClock.now - start >= stallWindow { return FloodResult(accepted: accepted, end: .blocked) }
            var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            _ = poll(&pfd, 1, 100)
            sample()
        }
    }

    // MARK: Reading and writing

    /// Writes whatever is queued (the rest of the flood chunk first) and reads whatever arrives,
    /// until `done` — which parses what was read, e.g. with ``nextFrame(_:)`` — returns true.
    /// Throws when the server closes first, or when nothing moves either way for ``ioStall``.
    func pump(sample: () -> Void = {}, until done: () throws -> Bool) throws {
        if chunkOffset < chunk.count {
            // Frames come after the flood's last, partly written frame: finish it first.
            let rest = Array(chunk[chunkOffset...])
            chunk = []
            chunkOffset = 0
            outbox.prepend(rest)
        }
        var lastProgress = ContinuousClock.now
        while try !done() {
            if peerClosed { throw Failure("the server closed the connection") }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN) | (outbox.count > 0 ? Int16(POLLOUT) : 0), revents: 0)
            _ = poll(&pfd, 1, 100)
            var progressed = try readAvailable()
            if outbox.count > 0 { progressed = try writeAvailable() || progressed }
            sample()
            if progressed {
                lastProgress = .now
            } else if ContinuousClock.now - lastProgress >= ioStall {
                throw Failure("no byte moved either way for \(ioStall) (\(outbox.count) bytes still to write)")
            }
        }
    }

    /// Waits for the server to close TCP (EOF), discarding anything else it sends.
    func waitForEOF() throws {
        try pump {
            self.inbox.consume(self.inbox.count)
            return self.peerClosed
        }
    }

    /// Parses one complete server frame from what was read, passes it to `body`, and consumes
    /// it. Returns false when no complete frame is buffered.
    func nextFrame(_ body: (Frame) throws -> Void) throws -> Bool {
        let r = inbox.readable
        guard let h = try RawFrameHeader.parse(r), r.count >= h.frameLength else { return false }
        try body(Frame(fin: h.fin, opcode: h.opcode,
                       payload: UnsafeRawBufferPointer(rebasing: r[h.headerLength..<h.frameLength])))
        inbox.consume(h.frameLength)
        return true
    }

    /// Reads what is available, at most 1 MiB per call (so that parsing keeps up). True if any
    /// byte (or EOF) arrived.
    private func readAvailable() throws -> Bool {
        var total = 0
        while total < 1 << 20 && !peerClosed {
            let n = inbox.receive(from: fd, upTo: 256 << 10)
            if n > 0 { total += n; continue }
            if n == 0 { peerClosed = true; return true }
            let e = errno
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { break }
            throw Failure("recv: errno \(e)")
        }
        return total > 0
    }

    /// Writes what the socket takes. True if it took anything.
    private func writeAvailable() throws -> Bool {
        var total = 0
        while outbox.count > 0 {
            let r = outbox.readable
            let n = send(fd, r.baseAddress!, r.count, Int32(MSG_NOSIGNAL))
            if n > 0 { total += n; outbox.consume(n); continue }
            let e = errno
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { break }
            throw Failure("send: errno \(e)")
        }
        return total > 0
    }
}

/// A FIFO of bytes in one malloc'ed block: appends at the end, consumes from the front, and
/// compacts instead of shifting on every consume (draining millions of small frames stays linear).
final class ByteQueue {
    private var storage: UnsafeMutableRawPointer
    private var capacity: Int
    private var start = 0
    private var end = 0

    init(capacity: Int = 64 << 10) {
        self.capacity = capacity
        storage = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
    }

    deinit { storage.deallocate() }

    var count: Int { end - start }
    var readable: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: storage + start, count: end - start) }

    func consume(_ n: Int) {
        precondition(n <= count)
        start += n
        if start == end { start = 0; end = 0 }
    }

    /// Makes room for `n` more bytes at the end.
    private func reserve(_ n: Int) {
        if end + n <= capacity { return }
        if start > 0 {
            (storage).copyMemory(from: storage + start, byteCount: end - start)
            end -= start
            start = 0
            if end + n <= capacity { return }
        }
        var newCapacity = capacity * 2
        while newCapacity < end + n { newCapacity *= 2 }
        let bigger = UnsafeMutableRawPointer.allocate(byteCount: newCapacity, alignment: 16)
        bigger.copyMemory(from: storage, byteCount: end)
        storage.deallocate()
        storage = bigger
        capacity = newCapacity
    }

    func append(_ bytes: [UInt8]) {
        reserve(bytes.count)
        bytes.withUnsafeBytes { (storage + end).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        end += bytes.count
    }

    func prepend(_ bytes: [UInt8]) {
        let rest = Array(readable)
        start = 0
        end = 0
        append(bytes)
        append(rest)
    }

    /// recv(2) of up to `max` bytes into the end; returns what recv returned.
    func receive(from fd: Int32, upTo max: Int) -> Int {
        reserve(max)
        let n = recv(fd, storage + end, max, 0)
        if n > 0 { end += n }
        return n
    }

    /// Offset of the first occurrence of `pattern` in the readable bytes.
    func find(_ pattern: [UInt8]) -> Int? {
        let r = readable
        guard r.count >= pattern.count else { return nil }
        for i in 0...(r.count - pattern.count) where pattern.indices.allSatisfy({ r[i + $0] == pattern[$0] }) {
            return i
        }
        return nil
    }
}
