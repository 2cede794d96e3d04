/// A token bucket: `burst` tokens, refilled at `ratePerSecond`; each inbound line costs one.
///
/// The clock is injected (seconds, monotonic), so the limiter is a pure value that tests drive
/// by hand. Shared with the test target (symlinked into Tests/ChatRoomTests/Shared).
package struct RateLimiter: Sendable {
    /// What ``take()`` decided.
    package enum Decision: Equatable, Sendable {
        case allowed
        /// Over the limit; a token is available again in `retryAfter` seconds.
        case limited(retryAfter: Double)
    }

    package let ratePerSecond: Double
    package let burst: Double
    private let now: @Sendable () -> Double
    private var tokens: Double
    private var last: Double

    /// - Parameter now: monotonic time in seconds (default: `ContinuousClock`).
    package init(ratePerSecond: Double = 20, burst: Double = 40, now: @escaping @Sendable () -> Double = RateLimiter.monotonicSeconds) {
        precondition(ratePerSecond > 0 && burst >= 1)
        self.ratePerSecond = ratePerSecond
        self.burst = burst
        self.now = now
        self.tokens = burst
        self.last = now()
    }

    /// Takes one token if there is one.
    package mutating func take() -> Decision {
        let t = now()
        if t > last {
            tokens = min(burst, tokens + (t - last) * ratePerSecond)
            last = t
        }
        if tokens >= 1 {
            tokens -= 1
            return .allowed
        }
        // Round up to whole milliseconds, never 0.
        let wait = (1 - tokens) / ratePerSecond
        return .limited(retryAfter: max(0.001, (wait * 1000).rounded(.up) / 1000))
    }

    @Sendable package static func monotonicSeconds() -> Double {
        let d = ContinuousClock.now - epoch
        return Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }

    private static let epoch = ContinuousClock.now
}
