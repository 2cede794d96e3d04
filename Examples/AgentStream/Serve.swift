import ArgumentParser
import Foundation
import Logging
import Synchronization
import ExampleSupport
import Switchboard
import SwitchboardCore
import SwitchboardChannel
#if canImport(Glibc)
import Glibc
#endif

/// `agent-stream serve`: the `/v1/ws` channel server.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve /v1/ws: sessions that outlive their connections, one agent turn per message.")

    @Option(help: "Address to bind.") var host = "127.0.0.1"
    @Option(help: "Port to listen on (0 = ephemeral; the bound port is printed).") var port = 8090
    @Option(help: "Require this bearer token (Authorization header or ?token=). Default: $AGENT_TOKEN (keeps it out of ps). Excludes the JWT flags.")
    var token: String?
    @Option(help: "Run this command per prompt instead of the built-in agent (JSON lines on stdin/stdout).")
    var agentCommand: String?
    @Option(help: "Messages per second allowed per session (a client's sessions together: 5 times this).")
    var rate: Double = 10
    @Option(help: "Burst of messages allowed per session (a client's sessions together: 5 times this).")
    var burst = 20
    @Option(help: "Delay between streamed words of the built-in agent, in milliseconds.") var wordDelayMs = 30
    @Option(help: "Seconds a session (and its running turn) waits for its client to reconnect.")
    var resumeGrace: Double = 30
    @Option(help: "Events a session keeps for a reconnecting client (also its send queue's bound).")
    var resumeBuffer = 1_000
    @Option(help: "Sessions at most, connected or in their grace period (beyond: 503, after evicting the longest-detached one).")
    var maxSessions = 256
    @Option(help: "Sessions one client (its token's sub with the JWT flags, else its token when tokens are distinct) may own at most; 0: no limit (beyond: 429).")
    var maxSessionsPerClient = 16
    @OptionGroup var access: ServerAccessOptions
    @OptionGroup var tokens: TokenOptions
    /// `--api-key-file`: here it protects `GET /metrics` only (agent-stream has no other HTTP API).
    @OptionGroup var apiKey: APIKeyOptions

    /// `--token`, else `$AGENT_TOKEN` (an empty value counts as unset).
    private var sharedToken: String? {
        token ?? ProcessInfo.processInfo.environment["AGENT_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
    }

    func validate() throws {
        if port < 0 || port > 65535 { throw ValidationError("--port must be 0...65535") }
        if !(rate > 0 && rate <= 1_000_000) || burst < 1 || burst > 1_000_000 {
            throw ValidationError("--rate must be > 0 and at most 1000000, --burst 1...1000000")
        }
        if let token, token.isEmpty { throw ValidationError("--token must not be empty") }
        if !(resumeGrace >= 0 && resumeGrace <= 86_400) { throw ValidationError("--resume-grace must be 0...86400 seconds") }
        if resumeBuffer < 1 || resumeBuffer > 1_000_000 { throw ValidationError("--resume-buffer must be 1...1000000 events") }
        if maxSessions < 1 || maxSessions > 1_000_000 { throw ValidationError("--max-sessions must be 1...1000000") }
        if maxSessionsPerClient < 0 { throw ValidationError("--max-sessions-per-client must be >= 0 (0: no limit)") }
        // One shared secret (--token or AGENT_TOKEN) and per-user signed tokens exclude each other.
        try tokens.validate(sharedToken: sharedToken)
    }

    func run() async throws {
        signal(SIGPIPE, SIG_IGN)
        raiseDescriptorLimit()
        var logger = Logger(label: "agent-stream")
        logger.logLevel = .warning
        var config = WebSocketServerConfiguration(host: host, port: port)
        config.shutdownTimeout = .seconds(2)
        access.apply(to: &config)
        // Reports to the Prometheus registry that `GET /metrics` serves (MetricsSupport trait).
        let server = PrometheusMetrics.makeServer(configuration: config, logger: logger)
        let metricsAccess = APIAccess(key: try apiKey.loadKey(), verifyToken: nil)
        let agent: any Agent = agentCommand.map { CommandAgent(command: $0) }
            ?? BuiltInAgent(wordDelay: .milliseconds(max(0, wordDelayMs)))
        let token = sharedToken
        // With the JWT flags a session belongs to its token's subject, not to the token itself.
        let signed = try await TokenAuthentication.make(tokens)
        let rate = self.rate, burst = self.burst, perClient = maxSessionsPerClient
        var limits = SessionLimits()
        limits.grace = .milliseconds(Int64((resumeGrace * 1000).rounded()))
        limits.bufferEvents = resumeBuffer
        let sessionLimits = limits
        // A refused client may retry once a session could have ended: after a grace period.
        let retryAfter = max(1, Int(resumeGrace.rounded(.up)))
        let registry = SessionRegistry(
            caps: SessionCaps(maxSessions: maxSessions, maxSessionsPerClient: perClient),
            clientRate: (rate * 5, burst * 5)
        ) { id, identity, clientLimiter, registry in
            AgentSession(sessionID: id, identity: identity, agent: agent, rate: rate, burst: burst,
                         clientLimiter: clientLimiter, limits: sessionLimits, verifier: signed?.verifier,
                         onExpired: { registry.remove($0) })
        }
        /// Who owns the request's sessions: the verified subject (`userInfo["sub"]`, set by the
        /// authenticator) with the JWT flags, else the bearer token. Never logged.
        @Sendable func identity(of request: WebSocketUpgradeRequest?, userInfo: [String: String]) -> String? {
            signed != nil ? userInfo["sub"] : request?.bearerToken
        }
        /// Who the request's session counts against (nil: per-client limits are off).
        @Sendable func client(of request: WebSocketUpgradeRequest?, userInfo: [String: String]) -> ClientKey? {
            guard perClient > 0 else { return nil }
            if signed != nil, let subject = userInfo["sub"] { return ClientKey.of(subject: subject) }
            return ClientKey.of(presentedToken: request?.bearerToken, sharedToken: token, peerAddress: request?.remoteAddress)
        }
        let owner = signed != nil ? "user" : "token"

        let refusals = RefusalLog()
        server.onHTTPRequest { head in
            switch (head.method, head.path) {
            case ("GET", "/healthz"):
                return .json(status: 200, "{\"status\":\"ok\",\"sessions\":\(registry.count),\"refused\":\(registry.refused)}")
            case ("GET", PrometheusMetrics.path):
                // Counters only; with --api-key-file the key is required. A build without the
                // MetricsSupport trait has none: 404.
                if case .denied(let response) = metricsAccess.checkKey(head) { return response }
                return PrometheusMetrics.response()
            default:
                return nil
            }
        }
        server.route(ChannelEndpoint.channelPath, authenticate: { request in
            // The token's claims (sub, name, …) and expiry: the connection is closed with 4001
            // at `exp` unless a `refresh` extends it.
            var claims: [String: String] = [:]
            var expiresAt: Date?
            if let signed {
                switch await signed.authenticate(request) {
                case .reject(let response):
                    return .reject(response)
                case .accept(let userInfo, let expiry):
                    (claims, expiresAt) = (userInfo, expiry)
                }
            } else if let token {
                guard let presented = request.bearerToken, ConstantTime.equals(presented, token) else {
                    return .unauthorized()
                }
            }
            guard let session = request.queryItems.first(where: { $0.name == "session_id" })?.value,
                  !session.isEmpty else {
                return .reject(.error(status: 400, message: "missing session_id query parameter",
                                      type: .invalidRequest, code: "missing_session_id"))
            }
            // Ours win over claims of the same names.
            var userInfo = claims
            userInfo["session_id"] = session
            userInfo["last_seq"] = nil
            if let raw = request.queryItems.first(where: { $0.name == "last_seq" })?.value {
                guard let lastSequence = UInt64(raw) else {
                    return .reject(.error(status: 400, message: "last_seq must be a non-negative integer",
                                          type: .invalidRequest, code: "invalid_last_seq"))
                }
                userInfo["last_seq"] = String(lastSequence)
            }
            // A session belongs to the identity it was opened with; a new one takes a slot now.
            switch registry.reserve(session, identity: identity(of: request, userInfo: userInfo),
                                    client: client(of: request, userInfo: userInfo)) {
            case .existing, .reserved:
                return .accept(userInfo: userInfo, expiresAt: expiresAt)
            case .forbidden:
                return .reject(.error(status: 403, message: "session \(session) belongs to another \(owner)",
                                      type: .permission, code: "session_forbidden"))
            case .serverFull:
                refusals.note(registry)
                return .reject(Self.tooManySessions(status: 503, type: .overloaded, retryAfter: retryAfter,
                                                    message: "the server has too many sessions; retry later"))
            case .clientFull:
                refusals.note(registry)
                return .reject(Self.tooManySessions(status: 429, type: .rateLimit, retryAfter: retryAfter,
                                                    message: "this client has too many sessions; close one or retry later"))
            }
        }) { connection in
            let sessionID = connection.userInfo["session_id"] ?? "?"
            let shownID = TerminalText.inline(sessionID)
            let lastSequence = connection.userInfo["last_seq"].flatMap { UInt64($0) }
            let ownerIdentity = identity(of: connection.request, userInfo: connection.userInfo)
            let clientKey = client(of: connection.request, userInfo: connection.userInfo)
            var expired = false
            while true {
                let session: AgentSession, created: Bool
                switch registry.claim(sessionID, identity: ownerIdentity, client: clientKey) {
                case .session(let s, let c):
                    (session, created) = (s, c)
                case .forbidden:
                    // Taken by another identity between the check and now.
                    await connection.close(code: .policyViolation, reason: "session belongs to another \(owner)")
                    return
                case .full:
                    // Its session ended between the check and now, and no slot is left for a new one.
                    refusals.note(registry)
                    await connection.close(code: .tryAgainLater, reason: "too many sessions")
                    return
                }
                log("session \(shownID) \(created ? "opened" : "resumed")")
                // Resuming a session that is gone (ended after its grace period, or before a restart).
                let failure = (created || expired) && lastSequence != nil ? "session_not_found" : nil
                let served = await session.serve(connection, lastSequence: created ? nil : lastSequence,
                                                 resumeFailure: failure)
                registry.release(session)
                if served {
                    let status = connection.closeStatus
                    log("session \(shownID) closed: \(status.map { "\($0.code.rawValue)" } ?? "unknown")")
                    return
                }
                expired = true   // its grace period ran out just now: open a new one
            }
        }
        let announce = Task {
            guard let bound = try? await server.listeningPort else { return }
            out("agent-stream listening on ws://\(host):\(bound)\(ChannelEndpoint.channelPath)\n")
        }
        defer { announce.cancel() }
        do {
            try await runUntilSignal(server, logger: server.logger)
        } catch {
            await Self.endSessions(registry)
            throw error
        }
        await Self.endSessions(registry)
    }

    /// The server has stopped: every session's turn is cancelled, which kills its agent process
    /// (SIGTERM, SIGKILL 300 ms later), and those turns' ends are awaited for up to 2 seconds,
    /// so that no agent outlives the server.
    static func endSessions(_ registry: SessionRegistry) async {
        var turns: [Task<Void, Never>] = []
        for session in registry.sessions {
            if let turn = await session.endForShutdown() { turns.append(turn) }
        }
        guard !turns.isEmpty else { return }
        let ending = turns
        await withTaskGroup(of: Void.self) { group in
            group.addTask { for turn in ending { await turn.value } }
            group.addTask { try? await Task.sleep(for: .seconds(2)) }
            await group.next()
            group.cancelAll()
        }
    }

    /// Raises the soft limit on open descriptors to the hard one: each session may hold a socket
    /// and three pipes to its agent process, so the usual soft limit of 1,024 runs out below
    /// 256 sessions (a turn then fails with `agent_error`, and accepts fail until some close).
    private func raiseDescriptorLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        let wanted = limit.rlim_max
        limit.rlim_cur = wanted
        if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) != 0 {
            log("could not raise the open file limit to \(wanted)")
        }
    }

    /// The refusal of a new session beyond a cap: `status` with the JSON error body (code
    /// `too_many_sessions`) and `Retry-After`.
    static func tooManySessions(status: Int, type: HTTPErrorType, retryAfter: Int, message: String) -> HTTPResponse {
        var response = HTTPResponse.error(status: status, message: message, type: type, code: "too_many_sessions")
        response.headers.replaceOrAdd(name: "Retry-After", value: String(retryAfter))
        return response
    }
}

/// Logs refused sessions with the gauges, at most once a second (a client hammering the caps
/// cannot flood the log).
final class RefusalLog: Sendable {
    private let last = Protected<ContinuousClock.Instant?>(nil)

    func note(_ registry: SessionRegistry) {
        let now = ContinuousClock.now
        let due = last.withLock { last in
            if let previous = last, now - previous < .seconds(1) { return false }
            last = now
            return true
        }
        if due { log("session refused: \(registry.count) sessions, \(registry.refused) refused so far") }
    }
}
