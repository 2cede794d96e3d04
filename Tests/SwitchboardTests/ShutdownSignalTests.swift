import Foundation
import Testing
@testable import Switchboard
import SwitchboardTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// `ShutdownSignal` in this process: a signal raised while it waits resumes it, and the
/// dispositions from before come back (serialized: the signals' disposition is process-wide).
@Suite(.serialized)
struct ShutdownSignalTests {
    /// The current handler of `signal` (SIG_DFL, SIG_IGN or a function).
    private static func disposition(_ signal: Int32) -> Int {
        var current = sigaction()
        sigaction(signal, nil, &current)
        return unsafeBitCast(current.__sigaction_handler.sa_handler, to: Int.self)
    }

    private static let defaultAction = unsafeBitCast(SIG_DFL, to: Int.self)

    @Test(arguments: [SIGINT, SIGTERM])
    func aSignalRaisedWhileWaitingEndsTheWaitAndRestoresTheDefault(_ signal: Int32) async throws {
        #expect(Self.disposition(signal) == Self.defaultAction)
        let installed = AsyncStream<Void>.makeStream()
        let waiting = Task {
            await ShutdownSignal.wait { installed.continuation.yield() }
        }
        for await _ in installed.stream { break }
        #expect(Self.disposition(signal) != Self.defaultAction, "caught while waiting")
        kill(getpid(), signal)   // to the process (a thread-directed raise stays pending on a thread that blocks it)
        await waiting.value
        #expect(Self.disposition(signal) == Self.defaultAction, "restored")
    }

    /// Two signals in a row (Ctrl-C twice) while one wait is pending end that wait, and the
    /// second is not kept for the next wait, which goes on until it is cancelled. SIGINT is
    /// ignored around the test: a signal that comes after the handlers were removed meets the
    /// disposition from before, which by default ends the process.
    @Test func aSecondSignalDoesNotEndTheNextWait() async throws {
        signal(SIGINT, SIG_IGN)
        defer { signal(SIGINT, SIG_DFL) }
        for round in 1...10 {
            let installed = AsyncStream<Void>.makeStream()
            let first = Task { await ShutdownSignal.wait { installed.continuation.yield() } }
            for await _ in installed.stream { break }
            kill(getpid(), SIGINT)
            kill(getpid(), SIGINT)
            await first.value
            let next = AsyncStream<Void>.makeStream()
            let ended = TestLock(false)
            let second = Task {
                await ShutdownSignal.wait { next.continuation.yield() }
                ended.withLock { $0 = true }
            }
            for await _ in next.stream { break }
            // Only a signal or a cancellation ends this wait, so however long the sleep, a
            // correct wait is still pending after it; a stale byte ends it within microseconds.
            try await Task.sleep(for: .milliseconds(200))
            #expect(!ended.withLock { $0 }, "round \(round): the next wait ended without a signal")
            second.cancel()
            await second.value
        }
        #expect(Self.disposition(SIGINT) == unsafeBitCast(SIG_IGN, to: Int.self), "the disposition from before")
    }

    /// A wait's cancellation that comes after a signal resumed it (the task cancelled in the
    /// moment between the two) finds nothing to cancel, and keeps nothing: it used to record
    /// the wait's id as "cancelled before it was added", for ever. Driven through the waiters
    /// directly, as `wait` does, so the cancellation surely comes after the signal.
    @Test func aCancellationAfterTheSignalLeavesNothingBehind() async throws {
        signal(SIGINT, SIG_IGN)
        defer { signal(SIGINT, SIG_DFL) }
        let waiters = ShutdownSignalWaiters.shared
        let before = waiters.pendingCancellationCount
        let id = waiters.nextID()
        await withUnsafeContinuation { (c: UnsafeContinuation<Void, Never>) in
            waiters.add(id, c)
            kill(getpid(), SIGINT)
        }
        waiters.remove(id)  // what the cancellation handler does
        #expect(waiters.pendingCancellationCount == before)
        // A cancellation before the wait is added still ends that wait at once.
        let early = waiters.nextID()
        waiters.remove(early)
        await withUnsafeContinuation { (c: UnsafeContinuation<Void, Never>) in waiters.add(early, c) }
        #expect(waiters.pendingCancellationCount == before)
        #expect(Self.disposition(SIGINT) == unsafeBitCast(SIG_IGN, to: Int.self), "the disposition from before")
    }

    @Test func aCancelledWaitReturnsAndRestoresTheDefault() async throws {
        let installed = AsyncStream<Void>.makeStream()
        let waiting = Task {
            await ShutdownSignal.wait { installed.continuation.yield() }
        }
        for await _ in installed.stream { break }
        #expect(Self.disposition(SIGTERM) != Self.defaultAction)
        waiting.cancel()
        await waiting.value
        #expect(Self.disposition(SIGTERM) == Self.defaultAction)
        #expect(Self.disposition(SIGINT) == Self.defaultAction)
        // Already cancelled: returns at once, and leaves nothing installed.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            await ShutdownSignal.wait()
        }
        await early.value
        #expect(Self.disposition(SIGTERM) == Self.defaultAction)
    }
}
