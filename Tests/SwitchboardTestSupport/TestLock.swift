import Foundation

/// A value behind an `NSLock`, for test support code shared between threads.
///
/// Not `Synchronization.Mutex`: ThreadSanitizer does not understand Mutex's futex-based
/// implementation on Linux and reports every locked access as a race; it does understand the
/// pthread mutex under NSLock.
package final class TestLock<State>: @unchecked Sendable {
    // Safety: `state` is only touched while `lock` is held.
    private var state: State
    private let lock = NSLock()

    package init(_ initial: State) { state = initial }

    package func withLock<R>(_ body: (inout State) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&state)
    }
}
