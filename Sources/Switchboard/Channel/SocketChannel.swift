#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CSwitchboardShims
import Synchronization
import SwitchboardCore

/// Receives what a ``SocketChannel`` reads and how it ends. Called on the channel's loop only.
protocol SocketChannelDelegate: AnyObject {
    /// Plaintext bytes arrived (decrypted when TLS). Valid only during the call.
    func channelRead(_ bytes: UnsafeRawBufferPointer)
    /// The peer closed its side (EOF, or TLS close_notify).
    func channelEOF()
    /// A read or write failed; the channel is already closed.
    func channelFailed(_ error: SwitchboardError)
    /// The send queue drained below its low-water mark after a writer asked to hear of it
    /// (``SocketChannel/requestWritableSignal()``) or after it had been above the high one.
    func channelWritable()
    /// Reading stopped because the send queue is above its high-water mark (a callback route's
    /// backpressure, or a ping flood). Counted by connections; nothing to do by default.
    func channelPausedReadingForOutbound()
    /// The peer took none of the queued bytes for the write-stall timeout
    /// (``OutboundLimits/writeStallTick``): the channel is already closed, TCP reset. By
    /// default reported as a `.timedOut` failure.
    func channelWriteStalled()
}

extension SocketChannelDelegate {
    func channelPausedReadingForOutbound() {}
    func channelWriteStalled() { channelFailed(.timedOut("write (the peer stopped reading)")) }
}

/// What happened to bytes handed to ``SocketChannel/append(exempt:_:)``.
enum OutboundStatus: Equatable {
    /// Queued; the queue is at or below its high-water mark.
    case queued
    /// Queued; the queue is now above its high-water mark: stop producing until it drains
    /// (``SocketChannelDelegate/channelWritable()``). With
    /// ``SocketChannel/pausesReadingAboveHighWaterMark`` the channel has also stopped reading
    /// (the peer's TCP window fills instead of our memory) until it is back at the low mark.
    case backpressure
    /// Not queued: the queue already holds more than ``SocketChannel/limit`` bytes.
    case overLimit
}

/// A non-blocking TCP socket (optionally TLS) registered on one ``EventLoop``.
///
/// The one outbound path: every byte for the socket — frames, pongs, close frames, HTTP
/// responses — goes through its ``OutboundQueue`` via ``append(exempt:_:)``, ``write(_:)`` or
/// ``queuePong(_:)``, and is written once per loop iteration (every frame produced while
/// handling one read goes out together), with `EPOLLOUT` for the rest.
///
/// Backpressure:
/// - the owner stops reading when its inbound queue is full (``setReading(_:)``);
/// - with ``pausesReadingAboveHighWaterMark`` (callback routes, whose handlers answer
///   synchronously and cannot wait), reading also stops while the queue is above
///   ``highWaterMark`` and resumes at or below ``lowWaterMark``. Owners that can wait instead
///   (a task's `send` suspends above the mark, so it stops taking messages and the inbound
///   queue stops the reading) leave it off: stopping reads for our own outbound data alone
///   would deadlock two full-duplex peers that both stream, each waiting for the other to read;
/// - a ping flood stops reading whoever the owner: see ``queuePong(_:)``;
/// - appends that may be refused get ``OutboundStatus/overLimit`` above ``limit``.
///
/// A peer that stops reading: while bytes stay queued after a flush, one timer checks every
/// ``OutboundLimits/writeStallTick`` whether the kernel took any since the last check, or the
/// peer acknowledged any of what the kernel holds; after more than four checks without
/// progress the TCP connection is reset (``timerFired()``).
/// Writes only clear a counter: the fast path (a flush that writes everything) arms nothing.
final class SocketChannel: EventLoopReceiver, EventLoopFlushable, EventLoopTimerTarget, @unchecked Sendable {
    // Safety: every member is touched only on `loop`'s thread (asserted in debug builds).

    // Stored properties are ordered, and sized, so that the object stays small: an idle
    // connection's memory is mostly this object and the connection actor.

    let loop: EventLoop
    let fd: Int32
    /// The loop's registration token (-1 while not registered).
    private var slotIndex: Int32 = -1
    /// The events epoll has for this socket (what ``interest`` was when last applied).
    private var registeredInterest: UInt32 = 0
    private var slot: Int { Int(slotIndex) }
    /// TLS only: the session and its ciphertext (see ``TLSChannelState``).
    private var tlsState: TLSChannelState?
    private var tls: TLSSession? { tlsState?.session }
    /// Strong on purpose: an open connection lives as long as its socket; ``close()`` breaks the cycle.
    var delegate: SocketChannelDelegate?

    /// Outgoing plaintext, private: writers go through ``append(exempt:_:)``, ``write(_:)`` and
    /// ``queuePong(_:)``.
    ///
    /// Not checked for exclusive access at run time (`@exclusivity(unchecked)`, like the
    /// connection's protocol state; it is touched several times per write): loop-confined,
    /// and the closures its `append` and `drain` run only serialize a frame or write to the
    /// socket or TLS session, never touching this channel.
    @exclusivity(unchecked) private var queue = OutboundQueue()
    /// Plaintext handed to TLS at a time.
    private static let tlsBatch = 64 << 10

    /// Reading stopped by the owner (its inbound queue is full).
    private var inboundPaused = false
    /// Reading stopped by the outbound side (queue above the high-water mark, or a ping flood).
    private var outboundPaused = false
    /// Whether reading stops while the queue is above the high-water mark (callback routes).
    var pausesReadingAboveHighWaterMark = false
    /// Pings answered while a pong already waited in the slot (the socket accepting nothing);
    /// saturates, and only its comparison with ``pingFloodLimit`` matters.
    private var pingsWhileBlocked: UInt8 = 0
    /// Past this many, the peer is flooding pings without reading the answers: reading stops
    /// until the pong is written. A keepalive sends one ping per interval, so only a flood (or a
    /// peer stuck for minutes) gets here.
    static let pingFloodLimit = 16
    private var reading: Bool { !inboundPaused && !outboundPaused }
    /// Whether the socket is being read now (neither side has stopped it).
    var isReading: Bool { reading && !isClosed }
    private var waitingForWritable = false
    private var flushScheduled = false
    /// ``interest`` may differ from ``registeredInterest``: applied at the end of the iteration.
    private var interestChanged = false
    private var closeWhenFlushed = false
    /// TLS: close_notify goes out once the queue is written (``sendCloseNotify()``).
    private var closeNotifyPending = false
    private(set) var isClosed = false
    private var peerClosedRead = false
    private var signalWritable = false
    private var tlsHandshakeDone = false
    /// Write-stall checks in a row that found no progress (a write that took bytes resets it).
    /// Fits beside the flags above.
    private var stallTicks: UInt8 = 0
    /// What the channel keeps only while a flush left bytes queued, or while it lingers: its
    /// timer and what it reported (see ``BlockedWriteState``). In the slot the linger timer
    /// had, so the object is no larger than before: a connection that keeps up carries none
    /// of it.
    private var blockedState: BlockedWriteState?
    /// io_uring only: what the receive completed after reading stopped (see ``HeldInput``).
    private var heldInput: HeldInput?

    /// The queue's water marks and limit, shared by every connection with the same settings.
    var limits = OutboundLimits.default {
        didSet {
            guard let reported = blockedState?.reported, reported != 0, oldValue !== limits else { return }
            oldValue.queuedBytes.wrappingSubtract(reported, ordering: .relaxed)
            limits.queuedBytes.wrappingAdd(reported, ordering: .relaxed)
        }
    }
    /// Above this many queued bytes ``isWritable`` turns false (and, with
    /// ``pausesReadingAboveHighWaterMark``, reading stops);
    /// ``SocketChannelDelegate/channelWritable()`` is called, and reading resumes, once the
    /// queue is back at or under ``lowWaterMark``.
    var highWaterMark: Int { limits.highWaterMark }
    var lowWaterMark: Int { limits.lowWaterMark }
    /// Appends that may be refused are refused once this many bytes are queued.
    var limit: Int { limits.limit }

    init(loop: EventLoop, fd: Int32, tls: TLSSession?) {
        self.loop = loop
        self.fd = fd
        self.tlsState = tls.map(TLSChannelState.init)
    }

    deinit {
        if !isClosed { Socket.close(fd) }
    }

    /// Registers with the loop; reading starts at once. With TLS, the handshake starts too and
    /// `tlsReady` is called once it completes (nil) or fails (the error; the channel is closed).
    func activate(tlsReady: ((SwitchboardError?) -> Void)? = nil) throws(SocketError) {
        registeredInterest = interest
        slotIndex = Int32(truncatingIfNeeded: try loop.register(fd: fd, events: registeredInterest, handler: self, receiver: self))
        if let tlsState {
            tlsState.handshakeCompletion = tlsReady
            driveTLSHandshake()
        } else {
            tlsHandshakeDone = true
            tlsReady?(nil)
        }
    }

    /// Starts TLS on an active plain channel whose first exchange is over (an HTTP `CONNECT`
    /// tunnel is up): from now on reads are decrypted and writes encrypted. `ready` is called as
    /// for ``activate(tlsReady:)``.
    func startTLS(_ session: TLSSession, ready: @escaping (SwitchboardError?) -> Void) {
        guard tlsState == nil, !isClosed, queue.isEmpty else {
            ready(.tls("TLS cannot start on this connection now"))
            return
        }
        let state = TLSChannelState(session)
        state.handshakeCompletion = ready
        tlsState = state
        tlsHandshakeDone = false
        driveTLSHandshake()
    }

    /// The verified client certificate (server with client certificates requested).
    var tlsPeerCertificate: TLSPeerCertificate? { tls?.peerCertificate }
    /// The negotiated TLS version (`TLSv1.2`, `TLSv1.3`), nil without TLS.
    var tlsProtocolVersion: String? { tls?.negotiatedProtocolVersion }

    private func driveTLSHandshake() {
        guard let tls, !tlsHandshakeDone else { return }
        do {
            let state = try tls.handshake()
            if tls.hasPendingCiphertext {
                if let tlsState { tls.drainCiphertext(into: &tlsState.cipherOut) }
                guard let blocked = writeCipher() else { return }
                if blocked && !waitingForWritable {
                    waitingForWritable = true
                    updateInterest()
                }
            }
            if state == .complete {
                tlsHandshakeDone = true
                if !queue.isEmpty { flushSoon() }
                tlsState?.takeHandshakeCompletion()?(nil)
            }
        } catch {
            let c = tlsState?.takeHandshakeCompletion()
            let err = SwitchboardError.tls(error)
            let d = delegate
            sendAlertBeforeClosing(tls)
            close()
            if let c { c(err) } else { d?.channelFailed(err) }
        }
    }

    /// A failed handshake: OpenSSL queued an alert that tells the peer why (a missing client
    /// certificate, an unknown CA…). Written best effort, once, without waiting; what the peer
    /// already sent is read and dropped first so that closing does not answer with a reset,
    /// which could destroy the alert before the peer reads it.
    private func sendAlertBeforeClosing(_ tls: TLSSession) {
        guard let tlsState else { return }
        tls.drainCiphertext(into: &tlsState.cipherOut)
        let buffer = loop.readBuffer
        for _ in 0..<4 {
            guard case .bytes(let n) = Socket.read(fd, into: buffer), n == buffer.count else { break }
        }
        guard tlsState.cipherOffset < tlsState.cipherOut.count else { return }
        let start = tlsState.cipherOffset
        _ = tlsState.cipherOut.withUnsafeBytes { raw in
            Socket.write(fd, UnsafeRawBufferPointer(rebasing: raw[start...]))
        }
    }

    /// The events the loop watches for: input while reading, writability while bytes wait.
    /// Never `EPOLLRDHUP` on its own: it is level-triggered and stays set once the peer's FIN is
    /// in, so a channel not reading (backpressure) woke its loop at once, every time, until
    /// reading resumed or the write-stall deadline came. While reading, the FIN comes as input
    /// (a read of 0); errors and hang-ups are reported whatever the mask.
    private var interest: UInt32 {
        var e: UInt32 = 0
        if reading && !peerClosedRead { e |= SystemConstants.epollIn }
        if waitingForWritable { e |= SystemConstants.epollOut }
        return e
    }

    /// The events wanted changed (writing blocked or unblocked, the peer's EOF): epoll hears of
    /// it now.
    private func updateInterest() {
        interestChanged = true
        applyInterest()
    }

    /// Reading stopped or resumed: epoll hears of it at the end of the loop's iteration, before
    /// it waits again (reads stop at once all the same: the read loop checks ``reading``).
    /// Changes that cancel out within an iteration cost no system call: a handshake stops
    /// reading while it decides and resumes when it upgrades, usually in the same turn.
    private func updateInterestSoon() {
        guard !isClosed, slot >= 0 else { return }
        interestChanged = true
        // io_uring: reading stopped cancels the receive at once (an entry in the ring, no
        // system call), so that what the kernel still receives for us, and we must hold until
        // reading resumes (``HeldInput``), is only what is already in flight.
        if !reading && loop.backend == .ioUring {
            applyInterest()
            return
        }
        flushSoon()
    }

    private func applyInterest() {
        guard interestChanged else { return }
        interestChanged = false
        guard !isClosed, slot >= 0 else { return }
        let wanted = interest
        guard wanted != registeredInterest else { return }
        registeredInterest = wanted
        loop.modify(fd: fd, slot: slot, events: wanted)
    }

    /// Bytes queued but not yet accepted by the kernel.
    var pendingByteCount: Int {
        queue.count + (tlsState.map { $0.cipherOut.count - $0.cipherOffset } ?? 0)
    }

    /// False while more than ``highWaterMark`` bytes are queued.
    var isWritable: Bool { pendingByteCount <= highWaterMark }

    /// Starts or stops reading the socket for the owner (its inbound backpressure). Reading
    /// happens only while neither the owner nor the outbound side has stopped it.
    func setReading(_ on: Bool) {
        guard on == inboundPaused else { return }
        inboundPaused = !on
        updateInterestSoon()
        if on { deliverBufferedTLSInputSoon() }
    }

    /// TLS: records read before reading stopped wait in the session (decrypting stops with the
    /// reading, see ``deliverPlaintext(from:)``); once reading resumes they are delivered from
    /// the loop's next turn, so that whoever resumed it (an upgrade handing the channel to its
    /// connection) is done first, and even if no new byte arrives on the socket to wake us.
    /// Bounded: while reading is stopped the socket is not read, so what waits is at most what
    /// one read brought.
    private func deliverBufferedTLSInputSoon() {
        if heldInput != nil, reading {
            loop.execute { [self] in deliverHeldInput() }
            return
        }
        guard reading, tlsHandshakeDone, let tls, tls.hasBufferedInput else { return }
        loop.execute { [self] in
            guard reading, !isClosed, !peerClosedRead, let tls = self.tls else { return }
            _ = deliverPlaintext(from: tls)
        }
    }

    // MARK: Writing

    /// Appends whole frames written by `body` straight into the queue and schedules a flush.
    /// Unless `exempt`, nothing is written (and `body` is not called) once more than ``limit``
    /// bytes are queued. Exempt writes are the ones bounded by construction: one close frame,
    /// one keepalive ping, one HTTP response, a send that waited for room.
    @discardableResult
    func append<E: Error>(exempt: Bool = false, _ body: (inout [UInt8]) throws(E) -> Void) throws(E) -> OutboundStatus {
        if !exempt && pendingByteCount > limit { return .overLimit }
        guard !isClosed else { return .queued }
        try queue.append(body)
        flushSoon()
        return outboundStatusAfterAppend()
    }

    /// Appends whole frames already serialized (a topic's frame, shared by its subscribers): the
    /// caller checked for room (``isWritable``), so exempt from ``limit``.
    @discardableResult
    func append(_ frames: UnsafeRawBufferPointer) -> OutboundStatus {
        guard !isClosed else { return .queued }
        queue.append(frames)
        flushSoon()
        return outboundStatusAfterAppend()
    }

    /// Appends a frame whose payload is held by reference, not copied: `header` writes its
    /// header, `payload` follows it on the wire. Same rules as ``append(exempt:_:)``.
    @discardableResult
    func append<E: Error>(exempt: Bool, header: (inout [UInt8]) throws(E) -> Void, payload: [UInt8]) throws(E) -> OutboundStatus {
        if !exempt && pendingByteCount > limit { return .overLimit }
        guard !isClosed else { return .queued }
        try queue.append(header)
        queue.appendReference(payload)
        flushSoon()
        return outboundStatusAfterAppend()
    }

    /// Appends bytes (an HTTP response, a handshake request): exempt from ``limit``.
    @discardableResult
    func write(_ bytes: [UInt8]) -> OutboundStatus {
        guard !isClosed else { return .queued }
        queue.append(adopting: bytes)
        flushSoon()
        return outboundStatusAfterAppend()
    }

    /// Queues a pong answering a ping. While the socket accepts nothing, the pong waits in the
    /// queue's pong slot, where a newer one replaces it (§5.5.3 allows answering only the most
    /// recent ping): a peer that floods pings and does not read costs one pong, and after
    /// ``pingFloodLimit`` such pings reading stops until the pong is written, so the flooding
    /// peer's sends block. Otherwise every ping gets its pong, in order.
    func queuePong(_ frame: [UInt8]) {
        guard !isClosed else { return }
        if waitingForWritable {
            if queue.setPong(frame) && pingsWhileBlocked < .max { pingsWhileBlocked += 1 }
        } else {
            queue.append(adopting: frame)
        }
        updateOutboundPause()
        flushSoon()
    }

    private func outboundStatusAfterAppend() -> OutboundStatus {
        updateOutboundPause()
        return pendingByteCount > highWaterMark ? .backpressure : .queued
    }

    /// Stops or resumes reading for the outbound side, and remembers that writers must hear
    /// when the queue drains.
    private func updateOutboundPause() {
        let pending = pendingByteCount
        if pending > highWaterMark { signalWritable = true }
        if !queue.holdsPong { pingsWhileBlocked = 0 }
        let flooded = pingsWhileBlocked >= Self.pingFloodLimit
        let pause: Bool
        if flooded || (pausesReadingAboveHighWaterMark && pending > highWaterMark) {
            pause = true
        } else if outboundPaused && pausesReadingAboveHighWaterMark {
            pause = pending > lowWaterMark            // resume only at the low mark
        } else {
            pause = false
        }
        guard pause != outboundPaused else { return }
        outboundPaused = pause
        updateInterestSoon()
        if pause {
            delegate?.channelPausedReadingForOutbound()
        } else {
            deliverBufferedTLSInputSoon()
        }
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
        applyInterest()
    }

    /// Writes as much as the kernel takes now; arms `EPOLLOUT` for the rest.
    func flushNow() {
        guard !isClosed else { return }
        let blocked: Bool
        if let tls {
            guard let b = flushTLS(tls) else { return }
            blocked = b
        } else {
            let fd = self.fd
            var failure: Int32 = 0
            var wrote = false
            let result = queue.drain { first, second in
                switch Socket.write(fd, first, second) {
                case .bytes(let n):
                    wrote = true
                    return .written(n)
                case .wouldBlock, .eof: return .written(0)
                case .failed(let e):
                    failure = e
                    return .failed
                }
            }
            if result == .failed {
                fail(.io(SocketError(errno: failure, operation: "write")))
                return
            }
            if wrote { stallTicks = 0 }
            blocked = result == .blocked
        }
        if blocked != waitingForWritable {
            waitingForWritable = blocked
            updateInterest()
        }
        if blocked { watchBlockedWrites() }
        afterWrite()
    }

    /// TLS: writes pending ciphertext, then encrypts and writes the next batch of plaintext,
    /// until the socket blocks or the queue is empty. Returns whether the socket blocked, or
    /// nil if the channel failed (then closed).
    private func flushTLS(_ tls: TLSSession) -> Bool? {
        while true {
            if tls.hasPendingCiphertext, let tlsState { tls.drainCiphertext(into: &tlsState.cipherOut) }
            switch writeCipher() {
            case nil: return nil
            case true?: return true
            case false?: break
            }
            guard !queue.isEmpty else {
                guard closeNotifyPending else { return false }
                closeNotifyPending = false
                tls.shutdown()
                continue  // writes the close_notify record
            }
            var encrypted = 0
            var tlsError: TLSError?
            _ = queue.drain { first, second in
                var taken = 0
                for piece in [first, second] where piece.count > 0 {
                    guard encrypted < Self.tlsBatch else { break }
                    do throws(TLSError) {
                        let n = try tls.writePlaintext(UnsafeRawBufferPointer(rebasing: piece.prefix(Self.tlsBatch - encrypted)))
                        encrypted += n
                        taken += n
                        if n < piece.count { break }
                    } catch {
                        tlsError = error
                        return .failed
                    }
                }
                return .written(taken)
            }
            if let tlsError {
                fail(.tls(tlsError))
                return nil
            }
            // Nothing taken (handshake not finished) and nothing to write: wait.
            if encrypted == 0 && !tls.hasPendingCiphertext { return false }
        }
    }

    /// Writes `cipherOut`; returns true if the socket blocked, false when all was written, nil
    /// if the channel failed.
    private func writeCipher() -> Bool? {
        guard let st = tlsState else { return false }
        while st.cipherOffset < st.cipherOut.count {
            let start = st.cipherOffset
            let result = st.cipherOut.withUnsafeBytes { raw in Socket.write(fd, UnsafeRawBufferPointer(rebasing: raw[start...])) }
            switch result {
            case .bytes(let n):
                st.cipherOffset += n
                stallTicks = 0
            case .wouldBlock, .eof: return true
            case .failed(let e):
                fail(.io(SocketError(errno: e, operation: "write")))
                return nil
            }
        }
        st.cipherOut = []
        st.cipherOffset = 0
        return false
    }

    private func afterWrite() {
        if closeWhenFlushed && pendingByteCount == 0 {
            close()
            return
        }
        reportQueued()
        updateOutboundPause()
        if signalWritable && pendingByteCount <= lowWaterMark {
            signalWritable = false
            delegate?.channelWritable()
        }
    }

    /// Remembers that a writer saw the queue above the high-water mark, so it hears when it drains.
    func requestWritableSignal() { signalWritable = true }

    /// Brings this channel's share of ``OutboundLimits/queuedBytes`` up to date after a flush,
    /// and lets the blocked-write state go once nothing is queued and no timer runs. The fast
    /// path (nothing was queued, nothing is) has no state: one nil check.
    @inline(__always)
    private func reportQueued() {
        guard let state = blockedState else { return }
        let now = pendingByteCount
        if now != state.reported {
            limits.queuedBytes.wrappingAdd(now - state.reported, ordering: .relaxed)
            state.reported = now
        }
        if now == 0 && state.timer == nil { blockedState = nil }
    }

    // MARK: Write-stall deadline

    /// A flush left bytes the kernel would not take: makes sure they are reported (see
    /// ``reportQueued()``) and the write-stall check runs. Only on a blocked flush; the timer,
    /// once armed, stays until it fires (no timer operation per write).
    private func watchBlockedWrites() {
        let state: BlockedWriteState
        if let blockedState {
            state = blockedState
        } else {
            state = BlockedWriteState()
            blockedState = state
        }
        guard state.timer == nil, let tick = limits.writeStallTick, !closeWhenFlushed, !isClosed else { return }
        state.kernelQueuedAtCheck = Socket.unacknowledgedBytes(fd)
        state.timer = loop.schedule(after: tick, target: self)
    }

    /// Whether the peer acknowledged bytes since the last check: the kernel wakes a writer only
    /// once a good part of its send buffer is free, which a slow but steady reader (a few MiB
    /// buffered, read at tens of KiB/s) can take longer than the timeout to free.
    private func peerAcknowledgedSinceLastCheck(_ state: BlockedWriteState) -> Bool {
        let now = Socket.unacknowledgedBytes(fd)
        defer { state.kernelQueuedAtCheck = now }
        return now >= 0 && state.kernelQueuedAtCheck >= 0 && now < state.kernelQueuedAtCheck
    }

    /// The channel's timer expired (``EventLoopTimerTarget``): after ``closeAfterFlush(linger:)``
    /// the linger is over (closed, queued bytes dropped); otherwise a write-stall check. It
    /// stops while nothing is queued, checks again while the kernel took bytes since the last
    /// check, and resets TCP after more than four checks in a row without any
    /// (``WebSocketConfiguration/writeStallTimeout``).
    func timerFired() {
        guard let state = blockedState, !isClosed else { return }
        state.timer = nil
        if closeWhenFlushed {
            close()
            return
        }
        guard pendingByteCount > 0 else {
            stallTicks = 0
            if state.reported == 0 { blockedState = nil }
            return
        }
        if peerAcknowledgedSinceLastCheck(state) {
            stallTicks = 0
        } else if stallTicks < .max {
            stallTicks += 1
        }
        if stallTicks > 4 {
            abortStalled()
        } else if let tick = limits.writeStallTick {
            state.timer = loop.schedule(after: tick, target: self)
        }
    }

    /// Resets TCP (`SO_LINGER` 0: the kernel drops its send buffer as well, and the peer gets
    /// an RST instead of bytes it will never read), releases the queue, and tells the delegate.
    private func abortStalled() {
        let d = delegate
        Socket.setLingerZero(fd)
        close()
        d?.channelWriteStalled()
    }

    // MARK: Reading

    func handleIO(events: UInt32) {
        guard !isClosed else { return }
        if events & SystemConstants.epollOut != 0 {
            if tlsHandshakeDone { flushNow() } else { flushHandshakeCiphertext() }
            if isClosed { return }
        }
        if events & (SystemConstants.epollIn | SystemConstants.epollErr | SystemConstants.epollHup | SystemConstants.epollRdHup) != 0 {
            if reading && !peerClosedRead {
                // With io_uring the receive reads, and reports EOF and errors after what it
                // holds: a read here could overtake bytes held while reading was stopped.
                if loop.backend != .ioUring { readAvailable() }
            } else if events & (SystemConstants.epollErr | SystemConstants.epollHup) != 0 {
                // Not reading (backpressure) but the socket died: report it.
                let e = Socket.pendingError(fd)
                fail(.io(SocketError(errno: e == 0 ? ECONNRESET : e, operation: "poll")))
            }
        }
    }

    /// During the TLS handshake: writes the handshake's ciphertext.
    private func flushHandshakeCiphertext() {
        guard let blocked = writeCipher() else { return }
        if blocked != waitingForWritable {
            waitingForWritable = blocked
            updateInterest()
        }
    }

    private func readAvailable() {
        // A few reads per readiness event; level-triggered epoll brings us back for the rest.
        // Each read is delivered at once, and the delegate's answers are queued: reading stops
        // here as soon as the queue goes above its high-water mark.
        for _ in 0..<4 {
            guard reading, !isClosed else { return }
            let buffer = loop.readBuffer
            switch Socket.read(fd, into: buffer) {
            case .bytes(let n):
                if !consume(UnsafeRawBufferPointer(rebasing: buffer[..<n])) { return }
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

    /// Hands bytes read from the socket on (decrypted first with TLS); returns false when the
    /// channel ended or is still in its TLS handshake.
    private func consume(_ bytes: UnsafeRawBufferPointer) -> Bool {
        if let tls {
            tls.receiveCiphertext(bytes)
            if !tlsHandshakeDone {
                driveTLSHandshake()
                guard tlsHandshakeDone, !isClosed else { return false }
            }
            return deliverPlaintext(from: tls)
        }
        delegate?.channelRead(bytes)
        return !isClosed
    }

    // MARK: Receiving (io_uring)

    /// Bytes the loop's multishot receive brought (``EventLoopReceiver``). Delivered at once
    /// while reading is on; otherwise held until it resumes (the loop is cancelling the receive:
    /// only what was already in flight gets here).
    func handleReceived(_ bytes: UnsafeRawBufferPointer) {
        guard !isClosed else { return }
        if reading && heldInput == nil {
            _ = consume(bytes)
            return
        }
        hold().bytes.append(contentsOf: bytes)
        if reading { deliverHeldInput() }
    }

    /// The receive ended with the peer's EOF (0) or an error; after what is held, if any.
    func handleReceiveEnded(errno: Int32) {
        guard !isClosed else { return }
        if reading && heldInput == nil {
            endReceive(errno: errno)
            return
        }
        hold().end = errno
        if reading { deliverHeldInput() }
    }

    private func hold() -> HeldInput {
        if let heldInput { return heldInput }
        let held = HeldInput()
        heldInput = held
        return held
    }

    private func endReceive(errno: Int32) {
        if errno == 0 {
            peerEOF()
        } else {
            fail(.io(SocketError(errno: errno, operation: "read")))
        }
    }

    /// Delivers what was held while reading was stopped, in one piece (as one `read` would
    /// have), then how the receive ended if it did.
    private func deliverHeldInput() {
        guard reading, !isClosed, let held = heldInput else { return }
        heldInput = nil
        if !held.bytes.isEmpty {
            _ = held.bytes.withUnsafeBytes { consume($0) }
            guard !isClosed else { return }
        }
        if let end = held.end {
            if reading {
                endReceive(errno: end)
            } else {
                hold().end = end
            }
        }
    }

    /// Decrypts what is available while reading is on (records read before the delegate stopped
    /// it wait in the session: ``deliverBufferedTLSInputSoon()``); returns false when the
    /// channel ended.
    private func deliverPlaintext(from tls: TLSSession) -> Bool {
        let plain = loop.tlsPlaintextBuffer
        while !isClosed {
            guard reading else { return true }
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
                fail(.tls(error))
                return false
            }
        }
        return false
    }

    private func peerEOF() {
        if !tlsHandshakeDone, let c = tlsState?.takeHandshakeCompletion() {
            close()
            c(.tls("connection closed during the TLS handshake"))
            return
        }
        peerClosedRead = true
        updateInterest()
        delegate?.channelEOF()
    }

    // MARK: Closing

    /// Ends the session: TLS close_notify (when TLS is on) after everything queued, then TCP
    /// closed once all is written — or after `linger` at the latest, so a peer that stops
    /// reading cannot keep the descriptor (and the queue) forever.
    func closeAfterFlush(linger: Duration) {
        guard !isClosed else { return }
        sendCloseNotify()
        closeWhenFlushed = true
        flushNow()
        if isClosed { return }
        if pendingByteCount == 0 {
            close()
            return
        }
        // The linger takes the timer over from a write-stall check (both end in a close).
        let state: BlockedWriteState
        if let blockedState {
            state = blockedState
        } else {
            state = BlockedWriteState()
            blockedState = state
        }
        state.timer?.cancel()
        state.timer = loop.schedule(after: linger, target: self)
    }

    /// TLS only: sends close_notify once everything queued so far is written (once; nothing
    /// queued later is sent). Plain TCP: nothing.
    func sendCloseNotify() {
        guard tls != nil, !isClosed, tlsHandshakeDone else { return }
        closeNotifyPending = true
        flushSoon()
    }

    /// Closes the socket now; queued bytes are dropped.
    func close() {
        guard !isClosed else { return }
        isClosed = true
        if let state = blockedState {
            state.timer?.cancel()
            state.timer = nil
            if state.reported != 0 { limits.queuedBytes.wrappingSubtract(state.reported, ordering: .relaxed) }
            blockedState = nil
        }
        if slot >= 0 { loop.deregister(fd: fd, slot: slot) }
        Socket.close(fd)
        tlsState = nil
        heldInput = nil
        queue.removeAll()
        delegate = nil
    }

    private func fail(_ error: SwitchboardError) {
        guard !isClosed else { return }
        let d = delegate
        // Taken before `close()`, which drops the TLS state: a handshake waiting for its
        // completion hears the error instead of waiting for its own timeout.
        let completion = tlsState?.takeHandshakeCompletion()
        close()
        if let completion {
            completion(error)
            return
        }
        d?.channelFailed(error)
    }
}

/// What a ``SocketChannel`` keeps only while a flush left bytes queued (or while it lingers
/// after ``SocketChannel/closeAfterFlush(linger:)``), so that a connection that keeps up does
/// not carry it: allocated on a blocked flush, released once nothing is queued and its timer
/// has fired, or at close.
final class BlockedWriteState {
    /// The write-stall check, or the linger deadline once the channel is closing.
    var timer: EventLoopTimer?
    /// Bytes the channel added to ``OutboundLimits/queuedBytes``.
    var reported = 0
    /// The kernel's unacknowledged bytes at the last write-stall check (-1: unknown): a peer
    /// that reads shrinks it even while the socket stays too full to wake us for writing.
    var kernelQueuedAtCheck: Int32 = -1
}

/// io_uring: what a channel's receive completed after its reading stopped (its owner's inbound
/// queue is full, or its outbound side paused it), until reading resumes. Bounded: reading
/// stopped cancels the receive, so what arrives is what was already in flight — at most the
/// loop's provided buffers (1 MiB, or 4 MiB without incremental buffers: see
/// ``IOURingDriver/bufferCount``) — and the end (EOF or an error).
final class HeldInput {
    var bytes: [UInt8] = []
    /// How the receive ended (0: EOF; else errno), once it has.
    var end: Int32?
}

/// A TLS channel's session and the state only TLS needs, kept out of ``SocketChannel`` itself
/// so that plain connections do not carry it.
final class TLSChannelState {
    let session: TLSSession
    /// Ciphertext waiting for the socket (at most one batch: plaintext is encrypted only once
    /// the previous batch is written).
    var cipherOut: [UInt8] = []
    var cipherOffset = 0
    /// Called once the handshake completes (nil) or fails.
    var handshakeCompletion: ((SwitchboardError?) -> Void)?

    init(_ session: TLSSession) { self.session = session }

    /// The completion, cleared so that it runs at most once.
    func takeHandshakeCompletion() -> ((SwitchboardError?) -> Void)? {
        defer { handshakeCompletion = nil }
        return handshakeCompletion
    }
}
