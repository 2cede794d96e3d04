import CSwitchboardShims
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Waits for SIGINT or SIGTERM, for servers that shut down gracefully on Ctrl-C or `kill`
/// without swift-service-lifecycle (with it, run the server in a `ServiceGroup` instead: see
/// ``WebSocketServer/run()``).
public enum ShutdownSignal {
    /// Returns once the process receives SIGINT or SIGTERM, or the calling task is cancelled.
    ///
    /// While waiting, the two signals' default action (ending the process) is replaced by this
    /// wait; when one arrives, the dispositions the process had before are restored, so a second
    /// Ctrl-C behaves as it did before the call. A signal is never lost while anyone waits: the
    /// handler writes it to a pipe that a thread of this type reads. Nor is one kept for later:
    /// a second signal caught before the handlers were removed does not end the next wait.
    public static func wait() async {
        await wait(afterInstalling: {})
    }

    /// Like ``wait()``, calling `ready` once the signals are caught and before suspending:
    /// print a server's "listening" line there, so that a script that stops the server as soon
    /// as it reads the line always gets a graceful shutdown (a signal sent before the handlers
    /// are in place ends the process with the default action).
    public static func wait(afterInstalling ready: () -> Void) async {
        let id = ShutdownSignalWaiters.shared.nextID()
        await withTaskCancellationHandler {
            await withUnsafeContinuation { (c: UnsafeContinuation<Void, Never>) in
                ShutdownSignalWaiters.shared.add(id, c)
                ready()
            }
        } onCancel: {
            ShutdownSignalWaiters.shared.remove(id)
        }
    }
}

/// The process's waiters for shutdown signals and the handlers installed for them: installed
/// when the first waiter comes, removed (the previous dispositions back) when a signal has
/// resumed every waiter or the last one was cancelled.
final class ShutdownSignalWaiters: @unchecked Sendable {
    // Safety: all state is under `state`'s lock; the pipe's descriptors never change once made.
    static let shared = ShutdownSignalWaiters()

    private struct State {
        var nextID: UInt64 = 0
        var waiters: [UInt64: UnsafeContinuation<Void, Never>] = [:]
        /// Ids handed out by `nextID` whose wait is not added yet.
        var announced: Set<UInt64> = []
        /// Those of them cancelled meanwhile: their `add` resumes at once. A cancellation of
        /// a wait already resumed (by a signal) finds its id in neither set and keeps nothing.
        var cancelled: Set<UInt64> = []
        /// The dispositions before ours, while ours are installed.
        var previous: [(Int32, UnsafeMutableRawPointer)] = []
        var readerRunning = false
    }

    private let state = Locked(State())
    /// Read end (blocking) and write end (non-blocking: the handler never waits); -1 when the
    /// pipe could not be made, in which case waiting falls back to the default actions.
    private let readFD: Int32
    private let writeFD: Int32
    private static let signals: [Int32] = [SIGINT, SIGTERM]

    private init() {
        var fds: [Int32] = [-1, -1]
        if pipe(&fds) == 0 {
            _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
            _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
            _ = fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK)
            readFD = fds[0]
            writeFD = fds[1]
        } else {
            readFD = -1
            writeFD = -1
        }
    }

    func nextID() -> UInt64 {
        state.withLock { s in
            s.nextID += 1
            s.announced.insert(s.nextID)
            return s.nextID
        }
    }

    /// Cancellations recorded for waits not added yet (for tests: 0 once every wait is added).
    var pendingCancellationCount: Int { state.withLock { $0.cancelled.count } }

    func add(_ id: UInt64, _ continuation: UnsafeContinuation<Void, Never>) {
        enum Outcome { case cancelled, waiting(startReader: Bool) }
        let outcome: Outcome = state.withLock { s in
            s.announced.remove(id)
            // Cancelled before it got here: resume at once.
            if s.cancelled.remove(id) != nil { return .cancelled }
            s.waiters[id] = continuation
            // Without a pipe, nothing would hear the signal: leave the default actions.
            guard readFD >= 0 else { return .waiting(startReader: false) }
            if s.previous.isEmpty {
                // No reader runs when none was installed; bytes left from a reader that ended
                // must not end this wait at once.
                if !s.readerRunning { drainStaleBytes() }
                switchboard_signal_forward_to(writeFD)
                for signal in Self.signals {
                    let previous = UnsafeMutableRawPointer.allocate(byteCount: Int(switchboard_signal_action_size()),
                                                                    alignment: 16)
                    if switchboard_signal_forward(signal, previous) == 0 {
                        s.previous.append((signal, previous))
                    } else {
                        previous.deallocate()
                    }
                }
            }
            if s.readerRunning { return .waiting(startReader: false) }
            s.readerRunning = true
            return .waiting(startReader: true)
        }
        switch outcome {
        case .cancelled:
            continuation.resume()
        case .waiting(startReader: true):
            let thread = Thread { [self] in readLoop() }
            thread.name = "switchboard.signals"
            thread.stackSize = 64 << 10
            thread.start()
        case .waiting(startReader: false):
            break
        }
    }

    func remove(_ id: UInt64) {
        let continuation: UnsafeContinuation<Void, Never>? = state.withLock { s in
            guard let c = s.waiters.removeValue(forKey: id) else {
                // Not added yet: its `add` resumes at once. Otherwise already resumed.
                if s.announced.remove(id) != nil { s.cancelled.insert(id) }
                return nil
            }
            if s.waiters.isEmpty { uninstall(&s) }
            return c
        }
        guard let continuation else { return }
        wakeReader()
        continuation.resume()
    }

    /// The previous dispositions back; the handler writes nothing more.
    private func uninstall(_ s: inout State) {
        for (signal, previous) in s.previous {
            _ = switchboard_signal_restore(signal, previous)
            previous.deallocate()
        }
        s.previous = []
        switchboard_signal_forward_to(-1)
    }

    /// Reads what an ended reader left in the pipe: a second signal that came before the first
    /// one's reader removed the handlers (two Ctrl-C in a row), or a cancellation's wake-up. Only
    /// while no reader runs, so that nothing else reads and `read` never blocks.
    private func drainStaleBytes() {
        var descriptor = pollfd(fd: readFD, events: Int16(POLLIN), revents: 0)
        var byte: UInt8 = 0
        while poll(&descriptor, 1, 0) == 1, descriptor.revents & Int16(POLLIN) != 0 {
            guard read(readFD, &byte, 1) == 1 else { return }
        }
    }

    /// A zero byte: the reader checks whether anyone still waits.
    private func wakeReader() {
        guard writeFD >= 0 else { return }
        var zero: UInt8 = 0
        _ = write(writeFD, &zero, 1)
    }

    /// The reader thread: resumes every waiter on a signal's byte, then ends; ends too when no
    /// one waits any more (the last waiter was cancelled).
    private func readLoop() {
        var byte: UInt8 = 0
        while true {
            let n = read(readFD, &byte, 1)
            if n < 0 && errno == EINTR { continue }
            let (resumed, done): ([UnsafeContinuation<Void, Never>], Bool) = state.withLock { s in
                if n == 1 && byte != 0 && !s.waiters.isEmpty {
                    let all = Array(s.waiters.values)
                    s.waiters = [:]
                    uninstall(&s)
                    s.readerRunning = false
                    return (all, true)
                }
                if s.waiters.isEmpty || n <= 0 {
                    s.readerRunning = false
                    return ([], true)
                }
                return ([], false)
            }
            for c in resumed { c.resume() }
            if done { return }
        }
    }
}
