import Foundation

/// A value behind a lock, for state that several tasks and threads share.
///
/// An `NSLock` (a pthread mutex) rather than the Synchronization module's `Mutex`: on Linux
/// that one waits with futexes that ThreadSanitizer does not see, so every access it protects
/// is reported as a race, and the examples are tested under ThreadSanitizer too.
package final class Protected<Value>: @unchecked Sendable {
    // Safety: `value` is only reached through `withLock`, under `lock`.
    private let lock = NSLock()
    private var value: Value

    package init(_ value: Value) { self.value = value }

    /// Runs `body` with the value, under the lock: keep it short and never call back into code
    /// that takes the same lock.
    package func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
