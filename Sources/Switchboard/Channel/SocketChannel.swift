#if canImport(Glibc)
import Glibc
import CSwitchboardShims
#elseif canImport(Musl)
import Musl
#endif
import SwitchboardCore

/// Receives what a ``SocketChannel`` reads and how it ends. Called on the channel's loop only.
protocol SocketChannelDelegate: AnyObject {
    /// Plaintext bytes arrived (decrypted when TLS). Valid only during the call.
    func channelRead(_ bytes: UnsafeRawBufferPointer)
    /// The peer closed its side (EOF, or TLS close_notify).
    func channelEOF()
    /// A read or write failed; the channel is already closed.
    func channelFailed(_ error: SwitchboardError)
    /// The send queue drained below its low-water mark after having been above the high one.
    func channelWritable()
}

/// A non-blocking TCP socket (optionally TLS) registered on one ``EventLoop``.
///
/// Queues outgoing bytes and writes them once per loop iteration (so every frame produced while
/// handling one read goes out in one system call), handles partial writes with `EPOLLOUT`, and
/// can stop reading (backpressure: the peer's TCP window then fills).
final class SocketChannel: EventLoopIOHandler, EventLoopFlushable, @unchecked Sendable {
    // Safety: every member is touched only on `loop`'s thread (asserted in debug builds).

    let loop: EventLoop
    let fd: Int32
    private var slot = -1
    private var tls: TLSSession?
    /// Strong on purpose: an open connection lives as long as its socket; ``close()`` breaks the cycle.
    var delegate: SocketChannelDelegate?

    /// Outgoing plaintext; writers append frames here, then call ``flushSoon()``.
    var sendBuffer: [UInt8] = []
    private var sendOffset = 0
    /// TLS only: ciphertext waiting for the socket.
    private var cipherOut: [UInt8] = []
    private var cipherOffset = 0

    private var reading = true
    private var waitingForWritable = false
    private var flushScheduled = false
    private var closeWhenFlushed = false
    private(set) var isClosed = false
    private var peerClosedRead = false

    /// Above this many queued bytes ``isWritable`` turns false; ``SocketChannelDelegate/channelWritable()``
    /// is called once the queue is back under ``lowWaterMark``.
    var highWaterMark = 1 << 20
    var lowWaterMark = 256 << 10
    private var signalWritable = false

    init(loop: EventLoop, fd: Int32, tls: TLSSession?) {
        self.loop = loop
        self.fd = fd
        self.tls = tls
    }

    deinit {
        if !isClosed { Socket.close(fd) }
    }

    /// Registers with the loop; reading starts at once. With TLS, the handshake starts too and
    /// `tlsReady` is called once it completes (nil) or fails (the error; the channel is closed).
    func activate(tlsReady: ((SwitchboardError?) -> Void)? = nil) throws(SocketError) {
        slot = try loop.register(fd: fd, events: interest, handler: self)
        if tls != nil {
            tlsHandshakeCompletion = tlsReady
            driveTLSHandshake()
        } else {
            tlsHandshakeDone = true
            tlsReady?(nil)
        }
    }

    private var tlsHandshakeDone = false
    private var tlsHandshakeCompletion: ((SwitchboardError?) -> Void)?

    private func driveTLSHandshake() {
        guard let tls, !tlsHandshakeDone else { return }
        do {
            let state = try tls.handshake()
            if tls.hasPendingCiphertext {
                tls.drainCiphertext(into: &cipherOut)
                guard writeOut(.cipher) else { return }
            }
            if state == .complete {
                tlsHandshakeDone = true
                let c = tlsHandshakeCompletion
                tlsHandshakeCompletion = nil
                c?(nil)
            }
        } catch {
            let c = tlsHandshakeCompletion
            tlsHandshakeCompletion = nil
            let err = SwitchboardError.tls(error.description)
            let d = delegate
            close()
            if let c { c(err) } else { d?.channelFailed(err) }
        }
    }

    private var interest: UInt32 {
        var e: UInt32 = EPOLLRDHUP.rawValue
        if reading && !peerClosedRead { e |= EPOLLIN.rawValue }
        if waitingForWritable { e |= EPOLLOUT.rawValue }
        return e
    }

    private func updateInterest() {
        guard !isClosed, slot >= 0 else { return }
        loop.modify(fd: fd, slot: slot, events: interest)
    }

    /// Bytes queued but not yet accepted by the kernel.
    var pendingByteCount: Int {
        (sendBuffer.count - sendOffset) + (cipherOut.count - cipherOffset)
    }

    /// False while more than ``highWaterMark`` bytes are queued.
    var isWritable: Bool { pendingByteCount <= highWaterMark }

    /// Starts or stops reading the socket (backpressure).
    func setReading(_ on: Bool) {
        guard on != reading else { return }
        reading = on
        updateInterest()
    }

    // MARK: Writing

    /// Appends bytes to the send queue and schedules a flush.
    func write(_ bytes: UnsafeRawBufferPointer) {
        guard !isClosed else { return }
        sendBuffer.append(contentsOf: bytes)
        flushSoon()
    }

    func write(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { write($0) }
    }

    /// Schedules one flush at the end of the current loop iteration.
    func flushSoon() {
        guard !flushScheduled, !isClosed else { return }
        flushScheduled = true
        loop.scheduleFlush(self)
    }

    func flushAtEndOfIteration() {
        flushScheduled = false
        flushNow()
    }

    /// Writes as much as the kernel takes now; arms `EPOLLOUT` for the rest.
    func flushNow() {
        guard !isClosed else { return }
        if let tls {
            if sendOffset < sendBuffer.count {
                let start = sendOffset
                let result = sendBuffer.withUnsafeBytes { raw in
                    Result { () throws(TLSError) -> Int in
                        var off = start
                        while off < raw.count {
                            let n = try tls.writePlaintext(UnsafeRawBufferPointer(rebasing: raw[off...]))
                            if n <= 0 { break }
                            off += n
                        }
                        return off
                    }
                }
                switch result {
                case .success(let off): sendOffset = off
                case .failure(let error):
                    fail(.tls(error.description))
                    return
                }
                compactSendBuffer()
            }
            if tls.hasPendingCiphertext { tls.drainCiphertext(into: &cipherOut) }
            guard writeOut(.cipher) else { return }
        } else {
            guard writeOut(.plain) else { return }
        }
        afterWrite()
    }

    /// Writes `buffer[offset...]`; returns false if the channel failed (then already closed).
    /// The buffer is passed `inout`, so failing (which clears the buffers) happens only after
    /// the access ends.
    private func writeOut(_ which: WriteQueue) -> Bool {
        var failure: Int32?
        switch which {
        case .plain: failure = Self.write(fd, &sendBuffer, &sendOffset)
        case .cipher: failure = Self.write(fd, &cipherOut, &cipherOffset)
        }
        if let e = failure {
            if e == EAGAIN {
                if !waitingForWritable {
                    waitingForWritable = true
                    updateInterest()
                }
                return true
            }
            fail(.io(SocketError(errno: e, operation: "write")))
            return false
        }
        if waitingForWritable && pendingByteCount == 0 {
            waitingForWritable = false
            updateInterest()
        }
        return true
    }

    private enum WriteQueue { case plain, cipher }

    /// Writes as much of `buffer[offset...]` as the kernel takes. Returns nil when all was
    /// written (the buffer is then emptied), EAGAIN when the rest must wait, or the errno.
    private static func write(_ fd: Int32, _ buffer: inout [UInt8], _ offset: inout Int) -> Int32? {
        while offset < buffer.count {
            let start = offset
            let result = buffer.withUnsafeBytes { raw in
                Socket.write(fd, UnsafeRawBufferPointer(rebasing: raw[start...]))
            }
            switch result {
            case .bytes(let n): offset += n
            case .wouldBlock, .eof: return EAGAIN
            case .failed(let e): return e
            }
        }
        emptyQueue(&buffer)
        offset = 0
        return nil
    }

    /// Empties a fully written queue and gives its storage back: an idle connection then holds
    /// no send buffer at all (memory per idle connection is what a connection keeps between
    /// writes), for the price of one small allocation per flush on a busy one.
    private static func emptyQueue(_ buffer: inout [UInt8]) {
        buffer = []
    }

    private func compactSendBuffer() {
        if sendOffset == sendBuffer.count {
            Self.emptyQueue(&sendBuffer)
            sendOffset = 0
        }
    }

    private func afterWrite() {
        if !isWritable { signalWritable = true }
        if signalWritable && pendingByteCount <= lowWaterMark {
            signalWritable = false
            delegate?.channelWritable()
        }
        if closeWhenFlushed && pendingByteCount == 0 {
            close()
        }
    }

    /// Remembers that a writer saw the queue above the high-water mark, so it hears when it drains.
    func requestWritableSignal() { signalWritable = true }

    // MARK: Reading

    func handleIO(events: UInt32) {
        guard !isClosed else { return }
        if events & EPOLLOUT.rawValue != 0 {
            flushNow()
            if isClosed { return }
        }
        if events & (EPOLLIN.rawValue | EPOLLERR.rawValue | EPOLLHUP.rawValue | EPOLLRDHUP.rawValue) != 0 {
            if reading && !peerClosedRead {
                readAvailable()
            } else if events & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 {
                // Not reading (backpressure) but the socket died: report it.
                let e = Socket.pendingError(fd)
                fail(.io(SocketError(errno: e == 0 ? ECONNRESET : e, operation: "poll")))
            }
        }
    }

    private func readAvailable() {
        // A few reads per readiness event; level-triggered epoll brings us back for the rest.
        for _ in 0..<4 {
            guard reading, !isClosed else { return }
            let buffer = loop.readBuffer
            switch Socket.read(fd, into: buffer) {
            case .bytes(let n):
                if let tls {
                    tls.receiveCiphertext(UnsafeRawBufferPointer(rebasing: buffer[..<n]))
                    if !tlsHandshakeDone {
                        driveTLSHandshake()
                        guard tlsHandshakeDone, !isClosed else { return }
                    }
                    if !deliverPlaintext(from: tls) { return }
                } else {
                    delegate?.channelRead(UnsafeRawBufferPointer(rebasing: buffer[..<n]))
                }
                if n < buffer.count { return }
            case .wouldBlock:
                return
            case .eof:
                peerEOF()
                return
            case .failed(let e):
                fail(.io(SocketError(errno: e, operation: "read")))
                return
            }
        }
    }

    /// Decrypts everything available; returns false when the channel ended.
    private func deliverPlaintext(from tls: TLSSession) -> Bool {
        let plain = loop.tlsPlaintextBuffer
        while !isClosed {
            do {
                switch try tls.readPlaintext(into: plain) {
                case .bytes(let n):
                    delegate?.channelRead(UnsafeRawBufferPointer(rebasing: plain[..<n]))
                case .wantMoreInput:
                    if tls.hasPendingCiphertext { flushSoon() }
                    return true
                case .closed:
                    peerEOF()
                    return false
                }
            } catch {
                fail(.tls(error.description))
                return false
            }
        }
        return false
    }

    private func peerEOF() {
        if !tlsHandshakeDone, let c = tlsHandshakeCompletion {
            tlsHandshakeCompletion = nil
            close()
            c(.tls("connection closed during the TLS handshake"))
            return
        }
        peerClosedRead = true
        updateInterest()
        delegate?.channelEOF()
    }

    // MARK: Closing

    /// Closes once everything queued has been written (or at once if nothing is queued).
    func closeAfterFlush() {
        guard !isClosed else { return }
        closeWhenFlushed = true
        flushNow()
        if !isClosed && pendingByteCount == 0 { close() }
    }

    /// Sends TLS close_notify if TLS is on; then closes after flushing.
    func shutdownTLSAndClose() {
        if let tls, !isClosed {
            tls.shutdown()
            tls.drainCiphertext(into: &cipherOut)
        }
        closeAfterFlush()
    }

    /// Closes the socket now; queued bytes are dropped.
    func close() {
        guard !isClosed else { return }
        isClosed = true
        if slot >= 0 { loop.deregister(fd: fd, slot: slot) }
        Socket.close(fd)
        tls = nil
        sendBuffer = []
        cipherOut = []
        delegate = nil
    }

    private func fail(_ error: SwitchboardError) {
        guard !isClosed else { return }
        let d = delegate
        close()
        if let c = tlsHandshakeCompletion {
            tlsHandshakeCompletion = nil
            c(error)
            return
        }
        d?.channelFailed(error)
    }
}
