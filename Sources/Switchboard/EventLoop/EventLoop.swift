#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CSwitchboardShims
import Foundation
import Synchronization
import SwitchboardCore

/// Something registered with an ``EventLoop`` that wants to hear when its file descriptor is ready.
///
/// Called on the loop's thread only.
protocol EventLoopIOHandler: AnyObject {
    /// `events` is the epoll event mask (`EPOLLIN`, `EPOLLOUT`, `EPOLLERR`, `EPOLLHUP`, `EPOLLRDHUP`).
    func handleIO(events: UInt32)
    /// Bytes received by an io_uring loop for a handler registered as a receiver (see
    /// ``EventLoopReceiver``); valid only during the call. Others are never called with bytes.
    func handleReceived(_ bytes: UnsafeRawBufferPointer)
    /// A receiver's receive ended: 0 for the peer's EOF, otherwise the `errno` it failed with.
    func handleReceiveEnded(errno: Int32)
}

extension EventLoopIOHandler {
    func handleReceived(_ bytes: UnsafeRawBufferPointer) {}
    func handleReceiveEnded(errno: Int32) {}
}

/// Something that wants to run once at the end of the current loop iteration (after every job
/// and I/O event of the iteration), e.g. to flush queued frames with one `writev`.
protocol EventLoopFlushable: AnyObject {
    func flushAtEndOfIteration()
}

/// A thread running an epoll loop, and the serial executor of every connection actor living on it.
///
/// Connection actors use the loop as their `unownedExecutor`, and per-connection handler tasks
/// prefer it as their task executor, so socket → parser → handler → send → socket stays on one
/// thread with no hop per message. Readiness callbacks, timers and jobs all run on the loop thread.
public final class EventLoop: @unchecked Sendable {
    // Safety: fields marked "loop-confined" are only touched on the loop thread; the job queue
    // and the sleeping flag are guarded by `shared`.

    private struct Shared {
        var jobs: [UnownedJob] = []
        var closures: [@Sendable () -> Void] = []
        var sleeping = false
        var wakeupPending = false
        /// Set when the loop thread has exited: later work runs on `fallback`.
        var stopped = false
    }

    /// After ``EventLoopGroup/shutdown()``, actors that still live on this loop (a connection someone awaits)
    /// keep working: their jobs run one at a time on this queue, with no I/O.
    private let fallback = DispatchQueue(label: "switchboard.loop.stopped")
    private let isStopped = Atomic<Bool>(false)

    /// How this loop waits (``EventLoopBackend/epoll`` or ``EventLoopBackend/ioUring``).
    public let backend: EventLoopBackend
    /// The epoll instance (-1 with io_uring).
    let epollFD: Int32
    private let wakeFD: Int32
    /// The io_uring backend's ring and registrations (loop-confined; set up by the loop thread).
    private var ring: IOURingDriver?
    /// Why the loop thread could not set its ring up (0: it did).
    private let startFailure = Atomic<Int32>(0)
    private let shared = Locked(Shared())
    private let threadID = Atomic<UInt>(0)
    /// Human-readable name, used for the thread name and in logs.
    public let name: String

    // Loop-confined state.
    private var handlers: [EventLoopIOHandler?] = []
    private var freeSlots: [Int] = []
    // The timer heap and the flush queues are not checked for exclusive access at run time
    // (`@exclusivity(unchecked)`: used several times per connection cycle): loop-confined, and
    // nothing runs inside their accesses (a timer fires, a channel flushes, after the timer or
    // the queue is taken out).
    @exclusivity(unchecked) private var timers = TimerHeap()
    @exclusivity(unchecked) private var flushQueue: [EventLoopFlushable] = []
    /// The flushes `runFlushes` is running (empty between runs; its capacity is kept).
    @exclusivity(unchecked) private var flushing: [EventLoopFlushable] = []
    private var localJobs: [UnownedJob] = []
    /// Spare arrays for the cross-thread work, swapped with ``Shared``'s under the lock by
    /// `runPendingWork` and handed back empty with their capacity (up to ``keptWorkCapacity``),
    /// so that queueing work does not allocate on every iteration.
    private var runningJobs: [UnownedJob] = []
    private var runningClosures: [@Sendable () -> Void] = []
    /// Beyond this many entries a burst's array is let go rather than kept for the next.
    private static let keptWorkCapacity = 1_024
    private var running = true
    /// Iterations of the loop so far: one per wait for I/O (loop-confined; for tests, which
    /// check that nothing wakes an idle loop over and over).
    private(set) var iterations = 0
    /// One large read buffer shared by every connection on this loop (loop-confined).
    let readBuffer: UnsafeMutableRawBufferPointer
    /// The allocation `readBuffer` lies in, half a page past its start: see ``readBufferPageOffset``.
    private let readBufferBase: UnsafeMutableRawBufferPointer
    /// Where the read buffer starts within a 4 KiB page. Large message buffers come from
    /// `mmap` (glibc's default above 128 KiB), so their payload starts a few dozen bytes into a
    /// page; a read buffer starting there too made every payload copy out of it a copy between
    /// addresses 4 KiB apart, which the CPU stalls on ("4K aliasing": 1 MiB echo ran at half
    /// speed until the allocator's threshold adapted). Half a page apart, the copies run at
    /// full speed.
    static let readBufferPageOffset = 2048
    /// Size of the shared read buffer: large reads mean few syscalls per byte.
    static let readBufferSize = 256 * 1024
    /// Decrypted bytes of TLS connections land here (loop-confined).
    let tlsPlaintextBuffer: UnsafeMutableRawBufferPointer
    /// The zlib streams this loop's connections share for permessage-deflate without context
    /// takeover (loop-confined: used only by code running on this loop; its streams are made
    /// on first use).
    let deflateStreams = PerMessageDeflateSharedStreams()

    /// `backend` is ``EventLoopBackend/epoll`` or ``EventLoopBackend/ioUring`` (resolved).
    init(name: String, backend: EventLoopBackend = .epoll) throws(SocketError) {
        self.name = name
        self.backend = backend
        let ep = backend == .ioUring ? -1 : epoll_create1(Int32(EPOLL_CLOEXEC))
        guard backend == .ioUring || ep >= 0 else { throw SocketError(errno: errno, operation: "epoll_create1") }
        let ev = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
        guard ev >= 0 else {
            let e = errno
            if ep >= 0 { close(ep) }
            throw SocketError(errno: e, operation: "eventfd")
        }
        epollFD = ep
        wakeFD = ev
        readBufferBase = .allocate(byteCount: Self.readBufferSize + 4096, alignment: 4096)
        readBuffer = UnsafeMutableRawBufferPointer(
            rebasing: readBufferBase[Self.readBufferPageOffset..<(Self.readBufferPageOffset + Self.readBufferSize)])
        tlsPlaintextBuffer = .allocate(byteCount: 64 * 1024, alignment: 16)
        if ep >= 0 {
            var event = epoll_event()
            event.events = SystemConstants.epollIn
            event.data.u64 = UInt64.max
            _ = epoll_ctl(epollFD, EPOLL_CTL_ADD, wakeFD, &event)
        }
        let thread = Thread { [unowned self] in self.run() }
        thread.name = name
        thread.stackSize = 1 << 20
        thread.start()
        while threadID.load(ordering: .acquiring) == 0 { sched_yield() }
        let failure = startFailure.load(ordering: .acquiring)
        if failure != 0 { throw SocketError(errno: failure, operation: "io_uring_setup") }
    }

    deinit {
        readBufferBase.deallocate()
        tlsPlaintextBuffer.deallocate()
    }

    /// Whether the caller is running on this loop's thread.
    package var inEventLoop: Bool {
        threadID.load(ordering: .relaxed) == currentThreadID()
    }

    // MARK: Running work

    /// Runs `work` on the loop thread (soon, never inline).
    public func execute(_ work: @escaping @Sendable () -> Void) {
        let (wake, stopped) = shared.withLock { s -> (Bool, Bool) in
            if s.stopped { return (false, true) }
            s.closures.append(work)
            return (Self.claimWakeup(&s), false)
        }
        if stopped { runOnFallback(work) }
        if wake { signalWakeup() }
    }

    private func runOnFallback(_ work: @escaping @Sendable () -> Void) {
        fallback.async { [self] in
            threadID.store(currentThreadID(), ordering: .releasing)
            work()
        }
    }

    private static func claimWakeup(_ s: inout Shared) -> Bool {
        guard s.sleeping, !s.wakeupPending else { return false }
        s.wakeupPending = true
        return true
    }

    private func signalWakeup() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    fileprivate func enqueueJob(_ job: UnownedJob) {
        if inEventLoop && !isStopped.load(ordering: .acquiring) {
            localJobs.append(job)
            return
        }
        let (wake, stopped) = shared.withLock { s -> (Bool, Bool) in
            if s.stopped { return (false, true) }
            s.jobs.append(job)
            return (Self.claimWakeup(&s), false)
        }
        if stopped {
            runOnFallback { [self] in run(job) }
        }
        if wake { signalWakeup() }
    }

    // MARK: Registration (loop thread only)

    /// Registers `fd` for the given epoll events; returns a token for `modify`/`deregister`.
    /// With io_uring, a `receiver` (the handler itself) gets its bytes from a multishot receive
    /// instead of `EPOLLIN` readiness (``EventLoopReceiver``); with epoll it is not used.
    func register(fd: Int32, events: UInt32, handler: EventLoopIOHandler, receiver: EventLoopReceiver? = nil) throws(SocketError) -> Int {
        assertInEventLoop()
        assert(receiver == nil || receiver === handler, "a receiver is registered as its own handler")
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
            handlers[slot] = handler
        } else {
            slot = handlers.count
            handlers.append(handler)
        }
        #if os(Linux)
        if let ring {
            ring.register(slot: slot, fd: fd, events: events, receives: receiver != nil)
            return slot
        }
        #endif
        var event = epoll_event()
        event.events = events
        event.data.u64 = UInt64(slot)
        if epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) != 0 {
            let e = errno
            handlers[slot] = nil
            freeSlots.append(slot)
            throw SocketError(errno: e, operation: "epoll_ctl(ADD)")
        }
        return slot
    }

    func modify(fd: Int32, slot: Int, events: UInt32) {
        assertInEventLoop()
        #if os(Linux)
        if let ring {
            ring.modify(slot: slot, events: events)
            return
        }
        #endif
        var event = epoll_event()
        event.events = events
        event.data.u64 = UInt64(slot)
        _ = epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event)
    }

    /// Removes `fd` from the poller. Call before closing the descriptor.
    func deregister(fd: Int32, slot: Int) {
        assertInEventLoop()
        #if os(Linux)
        if let ring {
            if slot >= 0 { ring.deregister(slot: slot) }
        } else {
            _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, nil)
        }
        #else
        _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, nil)
        #endif
        if slot >= 0, slot < handlers.count {
            handlers[slot] = nil
            freeSlots.append(slot)
        }
    }


    /// Asks for `flushable.flushAtEndOfIteration()` once this iteration's jobs and events are done.
    func scheduleFlush(_ flushable: EventLoopFlushable) {
        assertInEventLoop()
        flushQueue.append(flushable)
    }

    // MARK: Timers (loop thread only)

    /// Runs `body` on the loop after `delay`, unless the returned timer is cancelled first.
    @discardableResult
    package func schedule(after delay: Duration, _ body: @escaping () -> Void) -> EventLoopTimer {
        assertInEventLoop()
        let timer = EventLoopClosureTimer(deadline: Self.now() &+ delay.nanosecondsClamped, body: body)
        timers.insert(timer)
        return timer
    }

    /// Calls `target.timerFired()` on the loop after `delay`, unless the returned timer is
    /// cancelled first. The timer holds `target` strongly until it fires or is cancelled, with
    /// no closure: cheaper than ``schedule(after:_:)`` for a timer every connection keeps.
    func schedule(after delay: Duration, target: EventLoopTimerTarget) -> EventLoopTimer {
        assertInEventLoop()
        let timer = EventLoopTargetTimer(deadline: Self.now() &+ delay.nanosecondsClamped, target: target)
        timers.insert(timer)
        return timer
    }

    /// Monotonic nanoseconds.
    static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }

    func assertInEventLoop(file: StaticString = #fileID, line: UInt = #line) {
        assert(inEventLoop, "must be called on event loop \(name)", file: file, line: line)
    }

    // MARK: The loop

    private func run() {
        #if os(Linux)
        if backend == .ioUring {
            do {
                ring = try IOURingDriver(wakeFD: wakeFD)
            } catch {
                startFailure.store(error.errno == 0 ? EINVAL : error.errno, ordering: .releasing)
                threadID.store(currentThreadID(), ordering: .releasing)
                close(wakeFD)
                return
            }
        }
        #endif
        threadID.store(currentThreadID(), ordering: .releasing)
        let maxEvents = 1024
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: maxEvents)
        defer { events.deallocate() }
        while running {
            iterations &+= 1
            runPendingWork()
            if !running { break }
            let hasWork = !localJobs.isEmpty || shared.withLock { s -> Bool in
                let pending = !s.jobs.isEmpty || !s.closures.isEmpty
                if !pending { s.sleeping = true }
                return pending
            }
            let wait = waitNanoseconds(hasWork: hasWork)
            #if os(Linux)
            if let ring {
                // Idle long enough: the receive buffers' pages go back to the system; not yet:
                // wake up when it will be.
                var ringWait = wait
                if ring.trimPending, let untilTrim = ring.trimIfIdle(now: Self.now()), wait < 0 || wait > untilTrim {
                    ringWait = untilTrim
                }
                ring.submitAndWait(timeoutNanoseconds: ringWait)
                shared.withLock { s in
                    s.sleeping = false
                    s.wakeupPending = false
                }
                // The kernel runs a bounded number of deferred receives per call (20 on Linux
                // 6.18): while a round brought that many completions or more, more may be
                // waiting; a few more rounds serve every busy socket in this iteration, as one
                // epoll_wait would, instead of twenty per iteration.
                var rounds = 0
                while ring.processCompletions(handler: { slot in slot < handlers.count ? handlers[slot] : nil }) >= IOURingDriver.deferredWorkBatch,
                      rounds < 16 {
                    ring.submitAndWait(timeoutNanoseconds: 0)
                    rounds += 1
                }
                fireTimers()
                continue
            }
            #endif
            // Milliseconds, rounded up so that a timer never fires early.
            let timeout = wait < 0 ? -1 : Int32(clamping: wait / 1_000_000 + (wait % 1_000_000 == 0 ? 0 : 1))
            let n = epoll_wait(epollFD, events, Int32(maxEvents), timeout)
            shared.withLock { s in
                s.sleeping = false
                s.wakeupPending = false
            }
            if n > 0 {
                for i in 0..<Int(n) {
                    let ev = events[i]
                    let slot = ev.data.u64
                    if slot == UInt64.max {
                        var value: UInt64 = 0
                        _ = read(wakeFD, &value, 8)
                        continue
                    }
                    guard slot < UInt64(handlers.count), let handler = handlers[Int(slot)] else { continue }
                    handler.handleIO(events: ev.events)
                }
            }
            fireTimers()
        }
        runPendingWork()
        // From now on work goes to the fallback queue; hand it what is still queued, in order.
        let (jobs, closures) = shared.withLock { s -> ([UnownedJob], [@Sendable () -> Void]) in
            s.stopped = true
            defer { s.jobs = []; s.closures = [] }
            return (s.jobs, s.closures)
        }
        isStopped.store(true, ordering: .releasing)
        let leftover = localJobs + jobs
        localJobs = []
        for c in closures { runOnFallback(c) }
        for j in leftover {
            runOnFallback { [self] in run(j) }
        }
        #if os(Linux)
        // Submits the cancellations of what is still registered, then lets the ring go.
        ring?.submitAndWait(timeoutNanoseconds: 0)
        ring = nil
        #endif
        close(wakeFD)
        if epollFD >= 0 { close(epollFD) }
    }

    /// How long the loop may wait for I/O: 0 with work queued, until the next timer, or -1
    /// (no limit) without either.
    private func waitNanoseconds(hasWork: Bool) -> Int64 {
        if hasWork { return 0 }
        guard let deadline = timers.nextDeadline else { return -1 }
        let now = Self.now()
        return deadline <= now ? 0 : Int64(clamping: deadline - now)
    }

    #if os(Linux)
    /// How long an idle io_uring loop keeps its receive buffers' pages (see
    /// ``IOURingDriver/trimDelay``; loop thread only; no effect on epoll).
    var ioUringTrimDelay: Int64 {
        get { ring?.trimDelay ?? 0 }
        set { ring?.trimDelay = newValue }
    }

    /// The io_uring receive buffers' bytes resident now, the trims so far, and whether this
    /// ring can trim (loop thread only; `nil` on epoll). For tests.
    var ioUringBufferUse: (residentBytes: Int, trims: Int, canTrim: Bool)? {
        ring.map { ($0.residentBufferBytes, $0.trimCount, $0.canTrim) }
    }
    #endif

    /// Stops the loop thread after the work already queued. Registered sockets are not closed:
    /// close them first. Jobs enqueued afterwards never run.
    package func shutdown() {
        execute { [self] in running = false }
    }

    private func runPendingWork() {
        // Bounded rounds so a busy loop still gets back to epoll (fairness for I/O).
        var rounds = 0
        repeat {
            // Taken out of the properties while they run, so that nothing run here can see them.
            var closures = runningClosures, jobs = runningJobs
            runningClosures = []
            runningJobs = []
            shared.withLock { s in
                swap(&s.jobs, &jobs)
                swap(&s.closures, &closures)
            }
            for c in closures { c() }
            for j in jobs { run(j) }
            let keep = Self.keptWorkCapacity
            closures.empty(keepingCapacity: closures.capacity <= keep)
            jobs.empty(keepingCapacity: jobs.capacity <= keep)
            runningClosures = closures
            runningJobs = jobs
            var local = localJobs
            localJobs = []
            for j in local { run(j) }
            local.empty(keepingCapacity: true)
            if localJobs.isEmpty { localJobs = local }
            rounds += 1
        } while !localJobs.isEmpty && rounds < 16
        // Once, after every round: frames that several jobs of this iteration queued for one
        // socket (publishes to a subscriber, echoes) go out in one write.
        runFlushes()
    }

    private func runFlushes() {
        // Two arrays taking turns, each keeping its capacity: no allocation per loop iteration.
        while !flushQueue.isEmpty {
            swap(&flushQueue, &flushing)
            for f in flushing { f.flushAtEndOfIteration() }
            flushing.empty(keepingCapacity: true)
        }
    }

    private func run(_ job: UnownedJob) {
        job.runSynchronously(isolatedTo: asUnownedSerialExecutor(), taskExecutor: asUnownedTaskExecutor())
    }

    private func fireTimers() {
        guard timers.nextDeadline != nil else { return }
        let now = Self.now()
        while let timer = timers.popExpired(now: now) {
            timer.fire()
        }
        runPendingWork()
    }
}

extension EventLoop: SerialExecutor, TaskExecutor {
    /// Runs `job` on this loop's thread, never inline: called on the loop, it joins the loop's
    /// local job queue; from another thread it is queued and the loop woken if it sleeps.
    /// Jobs enqueued after the group's ``EventLoopGroup/shutdown()`` run on a fallback queue, so no task is lost.
    public func enqueue(_ job: consuming ExecutorJob) {
        enqueueJob(UnownedJob(job))
    }

    /// This loop as the serial executor of the actors it runs (``WebSocketConnection``).
    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    /// This loop as a task executor, for `withTaskExecutorPreference(_:operation:)` and
    /// `Task(executorPreference:)`: nonisolated async code then runs on the loop's thread.
    public func asUnownedTaskExecutor() -> UnownedTaskExecutor {
        UnownedTaskExecutor(ordinary: self)
    }

    /// Traps (precondition failure) unless called on this loop's thread (`inEventLoop`).
    public func checkIsolated() {
        precondition(inEventLoop, "not on event loop \(name)")
    }

    /// Whether `other` is this loop: one loop is one thread.
    public func isSameExclusiveExecutionContext(other: EventLoop) -> Bool {
        self === other
    }
}

extension Array {
    /// Removes every element: `removeAll(keepingCapacity:)` without its general path
    /// (`replaceSubrange` with an empty collection, about 2% of the loop's user time in the
    /// churn profile, where it runs four times per iteration, mostly on empty or one-element
    /// arrays). Elements are released from the end and the storage is kept when asked (popping
    /// would first copy a shared storage; the loop's arrays are not shared when emptied).
    @inline(__always)
    fileprivate mutating func empty(keepingCapacity: Bool) {
        guard keepingCapacity else {
            if capacity > 0 { self = [] }
            return
        }
        while popLast() != nil {}
    }
}

/// What an ``EventLoopTimer`` without a closure calls (``EventLoop/schedule(after:target:)``).
protocol EventLoopTimerTarget: AnyObject {
    /// On the loop thread, once, when the timer expires.
    func timerFired()
}

/// A one-shot timer on an ``EventLoop``. Loop-confined.
///
/// Two kinds, each holding only what it calls (``EventLoopClosureTimer``, a closure;
/// ``EventLoopTargetTimer``, a target): one class with both fields was 56 bytes, in glibc's
/// 64-byte size class, and every idle connection keeps a timer (its keepalive); each kind is
/// 40 bytes, in the 48-byte class.
package class EventLoopTimer {
    final let deadline: UInt64

    fileprivate init(deadline: UInt64) {
        self.deadline = deadline
    }

    /// Whether the timer was cancelled or has fired (it holds nothing then).
    var isCancelled: Bool { true }

    /// Cancels the timer (releasing what it holds); harmless if it already fired.
    package func cancel() {}

    /// Runs what the timer holds, once, releasing it first.
    fileprivate func fire() {}
}

/// A timer that runs a closure (``EventLoop/schedule(after:_:)``).
final class EventLoopClosureTimer: EventLoopTimer {
    private var body: (() -> Void)?

    init(deadline: UInt64, body: @escaping () -> Void) {
        self.body = body
        super.init(deadline: deadline)
    }

    override var isCancelled: Bool { body == nil }

    override package func cancel() {
        body = nil
    }

    override fileprivate func fire() {
        let b = body
        body = nil
        b?()
    }
}

/// A timer that calls a target's ``EventLoopTimerTarget/timerFired()``, with no closure
/// (``EventLoop/schedule(after:target:)``).
final class EventLoopTargetTimer: EventLoopTimer {
    private var target: EventLoopTimerTarget?

    init(deadline: UInt64, target: EventLoopTimerTarget) {
        self.target = target
        super.init(deadline: deadline)
    }

    override var isCancelled: Bool { target == nil }

    override package func cancel() {
        target = nil
    }

    override fileprivate func fire() {
        let t = target
        target = nil
        t?.timerFired()
    }
}

/// Binary min-heap of timers by deadline. A cancelled timer stays until it reaches the top
/// (skipped there) or until the next compaction: when the heap has doubled since the last one,
/// an insert first drops every cancelled timer (O(n) once per doubling, so O(1) per insert).
/// Without it a server whose connections come and go, cancelling nearly every timer it sets (a
/// handshake's, a connection's keepalive), held each one until its deadline, 10 to 20 s later:
/// hundreds of thousands of dead timers, and a heap as deep, under a steady churn.
struct TimerHeap {
    /// One reference per timer, nothing beside it: every idle connection has a timer here
    /// (its keepalive), so an entry's size counts in idle memory. Ordering reads the
    /// deadlines through the array's buffer, borrowing the timers (no reference counting).
    private var items: [EventLoopTimer] = []
    /// The size at which the next insert compacts: twice what the last compaction kept.
    private var compactAt = TimerHeap.minimumCompaction

    /// Timers held, cancelled ones included.
    var count: Int { items.count }
    static let minimumCompaction = 1024

    var nextDeadline: UInt64? {
        mutating get {
            while let first = items.first, first.isCancelled { _ = popFirst() }
            return items.first?.deadline
        }
    }

    mutating func insert(_ t: EventLoopTimer) {
        if items.count >= compactAt { compact() }
        let deadline = t.deadline
        items.append(t)
        items.withUnsafeMutableBufferPointer { heap in
            var i = heap.count - 1
            while i > 0 {
                let parent = (i - 1) / 2
                if heap[parent].deadline <= deadline { break }
                heap.swapAt(parent, i)
                i = parent
            }
        }
    }

    mutating func popExpired(now: UInt64) -> EventLoopTimer? {
        while let first = items.first {
            if first.isCancelled { _ = popFirst(); continue }
            if first.deadline > now { return nil }
            return popFirst()
        }
        return nil
    }

    private mutating func popFirst() -> EventLoopTimer? {
        guard !items.isEmpty else { return nil }
        items.swapAt(0, items.count - 1)
        let top = items.removeLast()
        siftDown(from: 0)
        return top
    }

    private mutating func siftDown(from start: Int) {
        items.withUnsafeMutableBufferPointer { heap in
            var i = start
            let n = heap.count
            while true {
                let l = 2 * i + 1, r = l + 1
                var m = i
                if l < n && heap[l].deadline < heap[m].deadline { m = l }
                if r < n && heap[r].deadline < heap[m].deadline { m = r }
                if m == i { break }
                heap.swapAt(i, m)
                i = m
            }
        }
    }

    /// Drops the cancelled timers and rebuilds the heap (bottom-up, O(n)), in new storage of
    /// about the survivors' size, so a burst's array is not kept either.
    private mutating func compact() {
        items = items.filter { !$0.isCancelled }
        compactAt = Swift.max(Self.minimumCompaction, 2 * items.count)
        var i = items.count / 2 - 1
        while i >= 0 {
            siftDown(from: i)
            i -= 1
        }
    }
}

extension Duration {
    /// Nanoseconds, clamped to [0, UInt64.max].
    var nanosecondsClamped: UInt64 {
        let (s, atto) = components
        if s < 0 { return 0 }
        let (ns, o1) = UInt64(s).multipliedReportingOverflow(by: 1_000_000_000)
        if o1 { return .max }
        let (sum, o2) = ns.addingReportingOverflow(UInt64(atto / 1_000_000_000))
        return o2 ? .max : sum
    }
}

/// An integer identifying the calling thread.
@inline(__always)
func currentThreadID() -> UInt {
    #if canImport(Darwin)
    return UInt(bitPattern: pthread_self())
    #else
    return UInt(pthread_self())
    #endif
}
