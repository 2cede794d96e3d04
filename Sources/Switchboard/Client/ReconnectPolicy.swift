import SwitchboardCore

/// Opt-in automatic reconnection for ``SocketAdapter``: exponential backoff with full jitter.
///
/// The delay before attempt *n* (1-based) is a uniformly random value in
/// `0 ... min(cap, base × 2^(n-1))` ("full jitter"), so a fleet of clients does not reconnect
/// in lockstep after a server restart. Only transient failures are retried: connection refused,
/// reset or timed out, DNS failures, 5xx handshake answers (from the server, or from a proxy
/// that could not reach it), and closes with 1001, 1006, 1011, 1012 or 1013. Never 4xx
/// handshake rejections (a proxy's 407 or 403 included), TLS failures, pin mismatches, or
/// closes with 1000, 1002, 1003, 1007, 1008, 1009 and other codes.
///
/// Authentication: a close with 4001 (`WebSocketCloseCode.tokenExpired`) or a handshake `401`
/// is retried only by an adapter with a token provider, which is asked for a new token before
/// the attempt (a provider that throws ends the reconnection with its error); without one they
/// are final, since the same credential would be refused again. A `429` (too many requests)
/// stays final either way: reconnecting is what the server asked us not to do.
///
/// An outage ends only when a connection has stayed up for ``stableAfter``: a server that
/// accepts the upgrade and closes at once (1011 from a handler that throws, 1013 from an
/// overloaded server) counts as a failed attempt, so the delays keep growing and
/// ``maxAttempts`` applies, instead of the backoff starting over after every handshake.
public struct ReconnectPolicy: Sendable, Equatable {
    /// First backoff ceiling (default 0.5 s).
    public var baseDelay: Duration
    /// Largest backoff ceiling (default 30 s).
    public var maxDelay: Duration
    /// Attempts per outage before giving up; nil retries forever (default nil). A connection
    /// that ends within ``stableAfter`` of its handshake counts as an attempt of the outage.
    public var maxAttempts: Int?
    /// What `send` does while disconnected.
    public var whileDisconnected: DisconnectedSendPolicy
    /// How long a connection must stay up after its handshake to end an outage (default 10 s).
    ///
    /// A connection that ends sooner does not reset the backoff: its end grows the delay like
    /// a failed connect and counts toward ``maxAttempts``. 10 s is well above what a server
    /// takes to reject a client after the upgrade (a throwing handler, an overloaded server's
    /// 1013, an authentication check), and short enough that after a real outage a healthy
    /// connection soon gives the next outage the short first delays again.
    public var stableAfter: Duration

    /// Reconnects with backoff between `baseDelay` and `maxDelay`, at most `maxAttempts` times
    /// per outage (nil: forever; 0: never, as ``never``), doing `whileDisconnected` with sends
    /// made during an outage. An outage ends once a connection stayed up for `stableAfter`.
    public init(baseDelay: Duration = .milliseconds(500), maxDelay: Duration = .seconds(30), maxAttempts: Int? = nil,
                whileDisconnected: DisconnectedSendPolicy = .failFast, stableAfter: Duration = .seconds(10)) {
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
        self.maxAttempts = maxAttempts
        self.whileDisconnected = whileDisconnected
        self.stableAfter = stableAfter
    }

    /// No reconnection: the stream finishes when the connection ends (the default).
    public static let never = ReconnectPolicy(maxAttempts: 0)

    /// Whether this policy reconnects at all (``never`` does not).
    public var reconnects: Bool { maxAttempts.map { $0 > 0 } ?? true }

    /// Backoff ceiling before attempt `attempt` (1-based).
    package func ceiling(forAttempt attempt: Int) -> Duration {
        let shift = min(max(attempt - 1, 0), 30)
        let base = baseDelay.nanosecondsClamped
        let (scaled, overflow) = base.multipliedReportingOverflow(by: UInt64(1) << UInt64(shift))
        let cap = maxDelay.nanosecondsClamped
        let ns = overflow ? cap : min(cap, scaled)
        return .nanoseconds(Int64(clamping: ns))
    }

    /// A full-jitter delay for `attempt`.
    package func delay<G: RandomNumberGenerator>(forAttempt attempt: Int, using rng: inout G) -> Duration {
        let ceiling = ceiling(forAttempt: attempt).nanosecondsClamped
        guard ceiling > 0 else { return .zero }
        return .nanoseconds(Int64(clamping: UInt64.random(in: 0...ceiling, using: &rng)))
    }

    /// Whether a connection that ended this way (or a failed attempt) is retried: a transient
    /// failure, or with a token provider (which supplies a new token for the attempt) an
    /// expired token (4001) or a `401`.
    package static func isRetried(closeCode: WebSocketCloseCode?, error: SwitchboardError?,
                                  hasTokenProvider: Bool) -> Bool {
        if hasTokenProvider {
            if let error, error.kind == .handshakeRejected, error.httpStatus == 401 { return true }
            if error == nil, closeCode == .tokenExpired { return true }
        }
        return isTransient(closeCode: closeCode, error: error)
    }

    /// Whether a connection that ended this way should be retried.
    package static func isTransient(closeCode: WebSocketCloseCode?, error: SwitchboardError?) -> Bool {
        if let error {
            switch error.kind {
            case .connect, .timedOut, .io, .dns: return true
            // A proxy that could not reach the server (5xx) may later; a 407 or 403 will not change.
            case .handshakeRejected, .proxy: return (error.httpStatus ?? 0) >= 500
            case .protocolViolation, .limitExceeded, .tls, .certificatePinning, .invalidArgument, .cancelled,
                 .tokenProvider: return false
            default: break
            }
        }
        guard let code = closeCode else { return true }
        switch code.rawValue {
        case 1001, 1006, 1011, 1012, 1013: return true
        default: return false
        }
    }
}

/// What ``SocketAdapter/send(command:)`` does while a reconnecting adapter is disconnected.
public enum DisconnectedSendPolicy: Sendable, Equatable {
    /// Throw `.notConnected` at once (default).
    case failFast
    /// Queue up to this many commands and send them, in order, after the next successful
    /// reconnect (after the ``SocketAdapter/onReconnect(_:)`` hook, before any command sent
    /// later). Beyond the bound, `send` throws `.limitExceeded`. A queued command that the
    /// next connection could not take (it ended at once) waits for the one after; if
    /// reconnection gives up, the commands still queued are in
    /// ``SocketAdapter/undeliveredCommands``.
    case queue(maxCommands: Int)
}

/// The connection states a ``SocketAdapter`` goes through, observable as a stream.
public enum SocketConnectionState: Sendable, Equatable {
    /// Opening a connection (the first, or a reconnection attempt).
    case connecting
    /// Open: the line stream delivers and `send` works.
    case connected
    /// Waiting `delay` before reconnection attempt `attempt` (1-based).
    case reconnecting(attempt: Int, delay: Duration)
    /// Final: the code/reason or the error that ended it.
    case closed(code: WebSocketCloseCode?, reason: String, error: SwitchboardError?)
}
