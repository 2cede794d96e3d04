import Foundation

/// When a connection's authentication expires (``WebSocketAuthDecision/accept(userInfo:expiresAt:)``)
/// and the timer that enforces it. Allocated only for a connection accepted with an expiry (or
/// given one by ``WebSocketConnection/extendAuthentication(until:)``): the others pay one nil
/// pointer (idle memory per connection). Loop-confined, like the connection's state.
final class ConnectionAuthenticationExpiry {
    /// The current deadline; only ever moved later.
    var deadline: Date
    /// Armed for the deadline as it was when armed: an extension does not re-arm it, the timer
    /// finds the later deadline when it fires and waits again (one timer per connection, no
    /// heap churn per refresh).
    var timer: EventLoopTimer?

    init(deadline: Date) { self.deadline = deadline }

    /// The wait until `deadline` from now (zero once past).
    var remaining: Duration {
        let seconds = deadline.timeIntervalSinceNow
        guard seconds > 0 else { return .zero }
        return .nanoseconds(Int64(clamping: UInt64(min(seconds, 1e9) * 1e9)))
    }
}
