import Foundation
import Logging
import SwitchboardCore

/// The deadline of the credential a server connection was accepted with
/// (``WebSocketAuthDecision/accept(userInfo:expiresAt:)``): a timer on the connection's loop
/// closes it with `WebSocketCloseCode.tokenExpired` unless an in-band refresh moved it.
extension WebSocketConnection {
    /// When the connection's authentication expires: the `expiresAt` its authentication hook
    /// accepted it with, as moved by ``extendAuthentication(until:)``; nil when it has none
    /// (it never expires).
    public var authenticationExpiresAt: Date? { authenticationExpiry?.deadline }

    /// Moves the authentication deadline to `until` (after the client proved a new credential
    /// in-band, e.g. a refreshed token's `exp`). Never moves it earlier: an older or equal date
    /// is ignored, so a replayed refresh cannot shorten a connection's life. On a connection
    /// without a deadline this sets one. No effect once the connection is closing.
    ///
    /// When the deadline passes without an extension, the connection is closed with
    /// `WebSocketCloseCode.tokenExpired` (4001, "token expired").
    public func extendAuthentication(until: Date) {
        guard !transportClosed, proto.state == .open else { return }
        if let expiry = authenticationExpiry {
            // The armed timer fires at the old deadline, sees the new one and waits again.
            if until > expiry.deadline { expiry.deadline = until }
            return
        }
        authenticationExpiry = ConnectionAuthenticationExpiry(deadline: until)
        armAuthenticationTimer()
    }

    /// Starts enforcing `deadline` (from ``start(leftover:callbacks:authenticationExpiresAt:)``).
    func startAuthenticationExpiry(_ deadline: Date?) {
        guard let deadline else { return }
        authenticationExpiry = ConnectionAuthenticationExpiry(deadline: deadline)
        armAuthenticationTimer()
    }

    /// Arms the timer for the current deadline. The timer's target is the connection itself
    /// (as for the keepalive timer): no closure and no weak reference per connection; it holds
    /// the connection until it fires or ``stopAuthenticationExpiry()`` cancels it.
    private func armAuthenticationTimer() {
        guard let expiry = authenticationExpiry else { return }
        expiry.timer?.cancel()
        expiry.timer = loop.schedule(after: expiry.remaining, target: self)
    }

    /// Whether the authentication timer is the one that just fired: a fired timer has let go
    /// of its target, one still waiting has not (``EventLoopTimer/isCancelled``; cancelled
    /// timers are set to nil).
    var authenticationTimerFired: Bool {
        authenticationExpiry?.timer?.isCancelled ?? false
    }

    /// The authentication timer fired: closes with 4001 if the deadline has passed, else waits
    /// for the (extended) deadline.
    func authenticationTimerTick() {
        guard let expiry = authenticationExpiry else { return }
        expiry.timer = nil
        guard !transportClosed, proto.state == .open else { return }
        // The timer runs on the monotonic clock, the deadline is wall-clock time: a deadline
        // not reached yet (extended, or the clocks drifted) is waited for again.
        if expiry.remaining > .milliseconds(1) {
            armAuthenticationTimer()
            return
        }
        counters?.logger.debug("authentication expired; closing with 4001", metadata: [
            "connection": "\(id)", "path": "\(request?.path ?? "")",
        ])
        if closeStatus == nil {
            closeStatus = WebSocketCloseStatus(code: .tokenExpired, reason: Self.tokenExpiredReason, error: nil)
        }
        startClose(code: .tokenExpired, reason: Self.tokenExpiredReason)
    }

    /// The close reason sent with `WebSocketCloseCode.tokenExpired`.
    static let tokenExpiredReason = "token expired"

    /// Cancels the authentication timer (every way of closing calls it), releasing the
    /// connection it holds. The deadline stays readable.
    func stopAuthenticationExpiry() {
        authenticationExpiry?.timer?.cancel()
        authenticationExpiry?.timer = nil
    }
}
