import Foundation
import Logging
import SwitchboardCore

/// Bearer tokens from the application's provider: one asked for before every connect attempt
/// and put on the upgrade, and the in-band refresh at 80% of a token's lifetime (see
/// ``SocketAdapter/init(group:reconnect:logger:tokenProvider:refreshCommand:)``). The token's
/// value is never logged nor put in a state or an error.
extension SocketAdapter {
    /// The options of one connect attempt: the endpoint's, with the provider's token (asked for
    /// now) as `Authorization: Bearer` in place of any the endpoint set.
    func attemptOptions(_ makeOptions: @Sendable () async throws(SwitchboardError) -> WebSocketClientOptions)
        async throws(SwitchboardError) -> WebSocketClientOptions {
        var options = try await makeOptions()
        guard tokenProvider != nil else { return options }
        let token = try await fetchToken()
        guard !token.value.utf8.contains(where: { $0 == 13 || $0 == 10 || $0 == 0 }) else {
            throw .tokenProvider(TokenRefused.controlCharacters)
        }
        options.headers.removeAll { $0.0.lowercased() == "authorization" }
        options.headers.append(("Authorization", "Bearer \(token.value)"))
        return options
    }

    /// Asks the provider for a token and keeps it (with when it was obtained, for the refresh).
    func fetchToken() async throws(SwitchboardError) -> SocketToken {
        let token = try await requestToken()
        self.token = (token, Date())
        return token
    }

    /// Asks the provider for a token, without keeping it.
    func requestToken() async throws(SwitchboardError) -> SocketToken {
        guard let tokenProvider else { throw .invalidArgument("no token provider") }
        do {
            return try await tokenProvider()
        } catch {
            throw .tokenProvider(error)
        }
    }

    /// What a token provider returned that cannot be sent.
    enum TokenRefused: Error, CustomStringConvertible {
        case controlCharacters
        var description: String { "the token contains CR, LF or NUL" }
    }

    // MARK: In-band refresh

    /// Starts refreshing the token on `c` (a task owned by the adapter, cancelled when `c`
    /// ends or the adapter closes): only with a ``refreshCommand`` and a token that expires.
    func startRefreshing(on c: WebSocketConnection) {
        stopRefreshing()
        guard refreshCommand != nil, token?.value.expiresAt != nil else { return }
        refreshTask = Task { await self.refreshLoop(on: c) }
    }

    func stopRefreshing() {
        refreshTask?.cancel()
        refreshTask = nil
    }

    /// How long after `obtained` a token expiring at `expiresAt` is refreshed: at 80% of its
    /// lifetime, leaving a fifth of it for the provider and the server (zero once past). The
    /// lifetime is measured on this machine's clock, from when the provider returned the token.
    static func refreshDelay(obtained: Date, expiresAt: Date, now: Date) -> Duration {
        let due = obtained.addingTimeInterval(expiresAt.timeIntervalSince(obtained) * 0.8)
        return Self.duration(due.timeIntervalSince(now))
    }

    /// The shortest wait between two refreshes (0.5 s): a provider whose tokens live only
    /// milliseconds (a backend clock far off ours) must not turn the refresh into a busy loop
    /// against the backend and the server. Well under any real token's lifetime (minutes).
    static let minimumRefreshInterval: Duration = .milliseconds(500)

    static func duration(_ seconds: TimeInterval) -> Duration {
        guard seconds > 0, seconds.isFinite else { return .zero }
        return .nanoseconds(Int64(clamping: UInt64(min(seconds, 1e9) * 1e9)))
    }

    /// At 80% of each token's lifetime: a new token from the provider, sent with the refresh
    /// command. A provider that fails is asked again with backoff until the current token
    /// expires; then the server's 4001 decides (and, with a reconnect policy, a new connection
    /// asks the provider again).
    func refreshLoop(on c: WebSocketConnection) async {
        guard let refreshCommand else { return }
        while !Task.isCancelled, connection === c, let (current, obtained) = token, let expiresAt = current.expiresAt {
            guard expiresAt > obtained else {
                // Expired on arrival: refreshing cannot help; the server's 4001 (and, with a
                // reconnect policy, a new connection asking the provider again) decides.
                logger.warning("the token provider returned an expired token; not refreshing",
                               metadata: ["connection": "\(c.id)"])
                return
            }
            let delay = Self.refreshDelay(obtained: obtained, expiresAt: expiresAt, now: Date())
            do {
                try await Task.sleep(for: max(delay, Self.minimumRefreshInterval))
            } catch {
                return
            }
            var failures = 0
            var fresh: SocketToken?
            while fresh == nil {
                guard !Task.isCancelled, connection === c else { return }
                do {
                    fresh = try await requestToken()
                } catch {
                    failures += 1
                    let left = expiresAt.timeIntervalSinceNow
                    logger.warning("token refresh failed", metadata: [
                        "connection": "\(c.id)", "error": "\(error.message)", "failures": "\(failures)",
                        "expiresIn": "\(Int(max(0, min(left, 1e9)).rounded(.up))) s",
                    ])
                    guard left > 0 else { return }
                    let backoff = reconnectPolicy.delay(forAttempt: failures, using: &rng)
                    do { try await Task.sleep(for: min(backoff, Self.duration(left))) } catch { return }
                }
            }
            // Kept only for the connection it was asked for (a reconnection asks anew).
            guard let fresh, !Task.isCancelled, connection === c else { return }
            token = (fresh, Date())
            do {
                try await send(command: TokenRefreshCommand(message: refreshCommand(fresh)))
            } catch {
                return  // the connection ended: the next one is opened with the new token
            }
            logger.debug("token refreshed in-band", metadata: [
                "connection": "\(c.id)", "expiresAt": "\(fresh.expiresAt.map { "\($0)" } ?? "none")",
            ])
        }
    }
}

/// The application's refresh command line, sent like any command.
struct TokenRefreshCommand: SocketCommand {
    let message: String
}
