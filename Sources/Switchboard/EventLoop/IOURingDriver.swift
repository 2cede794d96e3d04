#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import CSwitchboardShims

/// Something registered with an io_uring ``EventLoop`` that takes received bytes directly
/// (multishot receive into the loop's provided buffers) instead of a readiness event followed
/// by its own `read`. Called on the loop's thread only.
/// It implements ``EventLoopIOHandler/handleReceived(_:)`` and
/// ``EventLoopIOHandler/handleReceiveEnded(errno:)``, and is registered as its own handler.
protocol EventLoopReceiver: EventLoopIOHandler {}

#if os(Linux)
/// The io_uring side of an ``EventLoop`` (see ``EventLoopBackend/ioUring``): the ring, and per
/// registration slot what is armed on it. Loop-confined: created on the loop's thread (the ring
/// is single-issuer) and used only there.
///
/// Mapping of the epoll interest mask:
/// - `EPOLLIN` of a receiver: one multishot receive into the provided buffers; turned off by
///   cancelling it. Bytes completed after the owner stopped reading are the receiver's to
///   hold (``EventLoopReceiver``): at most what was in flight when the cancel ran.
/// - any other interest (`EPOLLOUT`; `EPOLLIN` of a listener): a one-shot poll, armed again
///   after each completion while the interest lasts, so a socket still ready is reported again
///   at once, like level-triggered epoll. A receiver's polls become multishot once its peer's
///   FIN is in (see ``arm(_:)``), and report only what epoll would (the wanted events, errors,
///   hang-ups).
/// - `EPOLLRDHUP`, `EPOLLERR`, `EPOLLHUP` of a receiver: reported by its receive (EOF, an
///   error); while it does not read, by its poll for writability if it waits for that,
///   otherwise by its next receive or its write-stall deadline.
///
/// Each request's user data carries the slot, a generation (bumped when the slot is given
/// up: completions of a former registration are dropped, their buffers handed back) and what
/// it is.
final class IOURingDriver {
    private enum Kind: UInt64 {
        case poll = 0, receive = 1, wake = 2, ignored = 3
    }

    private enum ReceiveState: UInt8 {
        case idle, armed, cancelling
    }

    private struct Slot {
        var fd: Int32 = -1
        var generation: UInt32 = 0
        var wanted: UInt32 = 0
        var pollArmed = false
        var receive = ReceiveState.idle
        /// Whether the slot's handler takes bytes (``EventLoopReceiver``); it is reached
        /// through the loop's handler table, so a slot holds no reference (20 bytes a slot).
        var receives = false
        /// A receiver whose peer has shut its side down: its polls are multishot (see
        /// ``arm(_:)``).
        var peerClosed = false
        /// Where the last request naming `fd` sits in the submission queue (see
        /// ``deregister(slot:)``).
        var lastEntry: UInt32 = 0
    }

    /// Submission queue entries; completions get four times as many slots (multishot
    /// requests post several each).
    static let submissionEntries: UInt32 = 1024
    /// Provided buffers, and the size of each (pages are touched only when filled). Where the
    /// kernel fills buffers incrementally (Linux 6.12), 8 of 128 KiB: a receive takes only what
    /// it needs, so a small message uses a slice and a large one up to 128 KiB at a time (16 of
    /// 64 KiB echoed 64 KiB messages 8–13% slower than epoll's 256 KiB reads; 8 of 128 KiB
    /// within noise of 4 of 256 KiB); otherwise 256 of 16 KiB, one per receive. 1 MiB or 4 MiB
    /// per loop at most, touched as data flows through and handed back once the loop has
    /// received nothing for ``trimDelay`` (see ``trimIfIdle(now:)``).
    static let incrementalBufferCount: UInt32 = 8
    static let incrementalBufferSize: UInt32 = 128 * 1024
    static let bufferCount: UInt32 = 256
    static let bufferSize: UInt32 = 16 * 1024
    /// How far the kernel has filled each buffer (incremental buffers only).
    private var bufferFill: [Int]

    /// How long (nanoseconds) after its last receive an idle loop hands the buffers' pages
    /// back to the system: without it, an idle server would keep the whole buffer area
    /// resident once connections' handshakes had flowed through it (0.1 KiB per connection of
    /// 10,000 held idle on one loop). `Int64.max`: never. Loop-confined.
    var trimDelay: Int64 = 1_000_000_000
    /// Whether the buffers may hold pages since the last trim.
    private var receivedSinceTrim = false
    /// Whether bytes came in since the loop last read its clock for the trim.
    private var receivedSinceClock = false
    private var lastReceive: UInt64 = 0
    /// Trims done (for tests).
    private(set) var trimCount = 0

    private let ring: UnsafeMutablePointer<switchboard_uring>
    /// Whether ``trimIfIdle(now:)`` can hand pages back here.
    let canTrim: Bool
    private var slots: [Slot] = []
    private let wakeFD: Int32

    /// Sets the ring up on the calling thread, which must be the loop's.
    init(wakeFD: Int32) throws(SocketError) {
        ring = .allocate(capacity: 1)
        var r = switchboard_uring_init(ring, Self.submissionEntries, Self.submissionEntries * 4)
        if r == 0 {
            r = switchboard_uring_setup_buffers(ring, Self.incrementalBufferCount, Self.incrementalBufferSize, 1)
            if r == -EINVAL {
                r = switchboard_uring_setup_buffers(ring, Self.bufferCount, Self.bufferSize, 0)
            }
            if r != 0 { switchboard_uring_exit(ring) }
        }
        guard r == 0 else {
            ring.deallocate()
            throw SocketError(errno: -r, operation: "io_uring_setup")
        }
        self.wakeFD = wakeFD
        canTrim = switchboard_uring_can_trim_buffers(ring) != 0
        bufferFill = ring.pointee.buf_incremental != 0 ? Array(repeating: 0, count: Int(ring.pointee.buf_count)) : []
        armWake()
    }

    deinit {
        switchboard_uring_exit(ring)
        ring.deallocate()
    }

    /// ``Locked``, not `Mutex`: ThreadSanitizer reported `Mutex`'s guarded accesses here as races
    /// (two groups started at once on io_uring).
    private static let probeResult = Locked<Int32?>(nil)

    /// 0 if a ring like the backend's can be set up here, else the `errno` that refused it.
    static func probe() -> Int32 {
        probeResult.withLock { stored in
            if let stored { return stored }
            let ring = UnsafeMutablePointer<switchboard_uring>.allocate(capacity: 1)
            defer { ring.deallocate() }
            var r = switchboard_uring_init(ring, 8, 32)
            if r == 0 {
                r = switchboard_uring_setup_buffers(ring, 8, 4096, 0)
                switchboard_uring_exit(ring)
            }
            stored = -r
            return -r
        }
    }

    // MARK: Idle trim

    /// Whether ``trimIfIdle(now:)`` has anything to do (the loop reads its clock only then).
    var trimPending: Bool { receivedSinceTrim }

    /// Hands the buffers' pages back when the loop has received nothing for ``trimDelay``;
    /// otherwise returns how long until it would (nanoseconds: the loop waits no longer than
    /// that), or `nil` when there is nothing to hand back. Called before each wait with the
    /// loop's clock.
    ///
    /// Safe only where the kernel writes into the buffers inside `io_uring_enter` alone
    /// (deferred task running; other set-ups never trim) and every completion has been reaped:
    /// then no byte in them is still to be read, and what the kernel writes after the trim
    /// lands in fresh pages.
    func trimIfIdle(now: UInt64) -> Int64? {
        guard receivedSinceTrim else { return nil }
        if receivedSinceClock {
            lastReceive = now
            receivedSinceClock = false
        }
        let idle = now >= lastReceive ? now - lastReceive : 0
        let left = trimDelay - Int64(clamping: idle)
        if left > 0 { return left }
        guard switchboard_uring_peek(ring) == nil else { return nil }
        if switchboard_uring_trim_buffers(ring) == 0 { trimCount += 1 }
        receivedSinceTrim = false
        return nil
    }

    /// Bytes of the buffer area resident now (for tests).
    var residentBufferBytes: Int { Int(switchboard_uring_buffer_resident_bytes(ring)) }

    // MARK: Registration

    func register(slot: Int, fd: Int32, events: UInt32, receives: Bool) {
        while slots.count <= slot { slots.append(Slot()) }
        slots[slot].fd = fd
        slots[slot].wanted = events
        slots[slot].receives = receives
        slots[slot].pollArmed = false
        slots[slot].receive = .idle
        slots[slot].peerClosed = false
        arm(slot)
    }

    func modify(slot: Int, events: UInt32) {
        guard slot < slots.count else { return }
        slots[slot].wanted = events
        if slots[slot].receives, slots[slot].receive == .armed, events & SystemConstants.epollIn == 0 {
            slots[slot].receive = .cancelling
            cancel(tag(slot, .receive))
        }
        arm(slot)
    }

    /// Gives the slot up: what is armed on it is cancelled, and completions still on their way
    /// are dropped (the generation changes). The descriptor may be closed right after.
    ///
    /// A request names its socket by descriptor number until it is submitted, when the kernel
    /// looks the number up. One still in the queue when the number is closed would be
    /// submitted against whatever socket the number names by then (an accept on any thread
    /// reuses the lowest free number at once) and take that socket's first bytes, or its
    /// readiness, for a registration that no longer exists. So a slot with a request still
    /// unsubmitted has the queue submitted now, before it returns (one `io_uring_enter`, only
    /// for a socket given up in the iteration that armed something on it).
    func deregister(slot: Int) {
        guard slot < slots.count else { return }
        let unsubmitted = slots[slot].fd >= 0 && switchboard_uring_is_unsubmitted(ring, slots[slot].lastEntry) != 0
        if slots[slot].pollArmed { cancel(tag(slot, .poll)) }
        if slots[slot].receive == .armed { cancel(tag(slot, .receive)) }
        // With the cancellations, which then run before the descriptor closes as well.
        if unsubmitted { _ = switchboard_uring_enter(ring, 0, 0) }
        slots[slot].generation &+= 1
        slots[slot].fd = -1
        slots[slot].wanted = 0
        slots[slot].pollArmed = false
        slots[slot].receive = .idle
        slots[slot].receives = false
        slots[slot].peerClosed = false
    }

    /// Arms what the slot's interest needs and is not armed yet.
    ///
    /// A receiver's poll watches writability only (its receive reads), and the kernel adds
    /// `EPOLLRDHUP` (with `EPOLLERR` and `EPOLLHUP`) to every poll's mask: once the peer's FIN
    /// is in, a one-shot poll would complete as soon as it is armed, again and again, while
    /// the socket is not writable. So from the first such completion on, the slot's polls are
    /// multishot, which the kernel runs edge-triggered: a completion when armed, then one per
    /// change on the socket. Writability is wanted only after a write would block, so its
    /// edge is still to come.
    private func arm(_ slot: Int) {
        let s = slots[slot]
        guard s.fd >= 0 else { return }
        var pollMask = s.wanted
        if s.receives {
            pollMask &= ~(SystemConstants.epollIn | SystemConstants.epollRdHup)
            if s.wanted & SystemConstants.epollIn != 0 && s.receive == .idle {
                switchboard_uring_prep_recv_multishot(nextSQE(naming: slot), s.fd, tag(slot, .receive))
                slots[slot].receive = .armed
            }
        }
        if pollMask != 0 && !s.pollArmed {
            switchboard_uring_prep_poll(nextSQE(naming: slot), s.fd, pollMask, tag(slot, .poll), s.peerClosed ? 1 : 0)
            slots[slot].pollArmed = true
        }
    }

    private func armWake() {
        let sqe = nextSQE()
        switchboard_uring_prep_poll(sqe, wakeFD, SystemConstants.epollIn, Kind.wake.rawValue, 1)
    }

    private func cancel(_ target: UInt64) {
        let sqe = nextSQE()
        switchboard_uring_prep_cancel(sqe, target, Kind.ignored.rawValue)
    }

    @inline(__always)
    private func tag(_ slot: Int, _ kind: Kind) -> UInt64 {
        UInt64(slots[slot].generation) << 32 | UInt64(truncatingIfNeeded: slot) << 2 | kind.rawValue
    }

    /// A submission entry, submitting what is queued first when the queue is full.
    private func nextSQE() -> UnsafeMutablePointer<io_uring_sqe> {
        while true {
            if let sqe = switchboard_uring_sqe(ring) { return sqe }
            _ = switchboard_uring_enter(ring, 0, 0)
        }
    }

    /// A submission entry for a request naming the slot's descriptor, remembered as the slot's
    /// last (see ``deregister(slot:)``).
    private func nextSQE(naming slot: Int) -> UnsafeMutablePointer<io_uring_sqe> {
        let sqe = nextSQE()
        slots[slot].lastEntry = ring.pointee.sqe_tail &- 1
        return sqe
    }

    // MARK: Waiting and completions

    /// Submits what is queued, and waits for a completion if `timeoutNanoseconds` is not 0
    /// (negative: without limit).
    /// A failed call (-EINTR, -ETIME when the wait timed out, -EBUSY while completions wait to
    /// be reaped) needs nothing more: the caller reaps what is there and calls again.
    func submitAndWait(timeoutNanoseconds: Int64) {
        _ = switchboard_uring_enter(ring, timeoutNanoseconds == 0 ? 0 : 1, timeoutNanoseconds)
    }

    /// Completions from one call at or above which the kernel may have left deferred work
    /// (receives) for the next call.
    static let deferredWorkBatch = 20

    /// Runs every completion available now: readiness to `handler(slot)`'s `handleIO`,
    /// received bytes to the slot's receiver. Returns how many there were.
    @discardableResult
    func processCompletions(handler: (Int) -> EventLoopIOHandler?) -> Int {
        var count = 0
        while let cqe = switchboard_uring_peek(ring) {
            count += 1
            let userData = cqe.pointee.user_data
            let res = cqe.pointee.res
            let flags = cqe.pointee.flags
            switchboard_uring_cqe_seen(ring)
            let kind = userData & 3
            if kind == Kind.ignored.rawValue { continue }
            if kind == Kind.wake.rawValue {
                var value: UInt64 = 0
                _ = read(wakeFD, &value, 8)
                if flags & switchboard_uring_cqe_f_more() == 0 { armWake() }
                continue
            }
            let slot = Int(truncatingIfNeeded: (userData >> 2) & 0x3FFF_FFFF)
            let generation = UInt32(truncatingIfNeeded: userData >> 32)
            let current = slot < slots.count && slots[slot].generation == generation && slots[slot].fd >= 0
            if kind == Kind.receive.rawValue {
                completeReceive(slot: slot, current: current, res: res, flags: flags, handler: handler)
            } else if current {
                if flags & switchboard_uring_cqe_f_more() == 0 { slots[slot].pollArmed = false }
                if res > 0 {
                    var ready = UInt32(truncatingIfNeeded: res)
                    if slots[slot].receives {
                        // What epoll would report: the wanted events, errors, hang-ups (see
                        // ``arm(_:)`` for the peer's FIN, which the kernel adds).
                        if ready & SystemConstants.epollRdHup != 0 { slots[slot].peerClosed = true }
                        ready &= slots[slot].wanted | SystemConstants.epollErr | SystemConstants.epollHup
                    }
                    if ready != 0 { handler(slot)?.handleIO(events: ready) }
                } else if res < 0 && res != -ECANCELED {
                    // The poll itself failed: the owner finds out why from the socket, and
                    // the poll is not armed again (it would fail the same way).
                    handler(slot)?.handleIO(events: SystemConstants.epollErr)
                    continue
                }
                if slot < slots.count, slots[slot].generation == generation { arm(slot) }
            }
        }
        return count
    }

    private func completeReceive(slot: Int, current: Bool, res: Int32, flags: UInt32, handler: (Int) -> EventLoopIOHandler?) {
        let bid = flags >> switchboard_uring_cqe_buffer_shift()
        let hasBuffer = flags & switchboard_uring_cqe_f_buffer() != 0 && bid < ring.pointee.buf_count
        // Where this completion's bytes start: incremental buffers fill front to back, each
        // completion after the previous one; the buffer comes back once the kernel is done
        // with it (no BUF_MORE).
        var start = 0
        if hasBuffer && !bufferFill.isEmpty {
            start = bufferFill[Int(bid)]
            bufferFill[Int(bid)] = start + Int(max(res, 0))
        }
        defer {
            if hasBuffer && (bufferFill.isEmpty || flags & switchboard_uring_cqe_f_buf_more() == 0) {
                if !bufferFill.isEmpty { bufferFill[Int(bid)] = 0 }
                switchboard_uring_buffer_return(ring, bid)
            }
        }
        // Bytes in a buffer touch its pages, for a registration given up too (a receive
        // completed before the deregistration, reaped after it): the idle trim hands them back.
        if res > 0 && hasBuffer && canTrim {
            receivedSinceTrim = true
            receivedSinceClock = true
        }
        guard current else { return }
        let generation = slots[slot].generation
        if flags & switchboard_uring_cqe_f_more() == 0 { slots[slot].receive = .idle }
        let receiver = slots[slot].receives ? handler(slot) : nil
        var rearm = true
        if res > 0 && (!hasBuffer || start + Int(res) > Int(ring.pointee.buf_size)) {
            // Bytes outside a buffer we can account for: never read them.
            rearm = false
            receiver?.handleReceiveEnded(errno: EIO)
        } else if res > 0 {
            if let receiver {
                let base = UnsafeRawPointer(switchboard_uring_buffer(ring, bid)) + start
                receiver.handleReceived(UnsafeRawBufferPointer(start: base, count: Int(res)))
            }
        } else if res == 0 {
            rearm = false
            receiver?.handleReceiveEnded(errno: 0)
        } else if res != -ENOBUFS && res != -ECANCELED {
            rearm = false
            receiver?.handleReceiveEnded(errno: -res)
        }
        // Ended (out of buffers, cancelled, or one of those that stop it): again if still wanted.
        if rearm, slot < slots.count, slots[slot].generation == generation, slots[slot].receive == .idle {
            arm(slot)
        }
    }
}
#else
final class IOURingDriver {
    static func probe() -> Int32 { ENOSYS }
}
#endif
