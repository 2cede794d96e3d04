import Foundation
import Testing
import Switchboard
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
