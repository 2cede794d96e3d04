import ArgumentParser
import Foundation
import Logging
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
    @Option(help: "Require this bearer token (Authorization header or ?token=).") var token: String?
    @Option(help: "Run this command per prompt instead of the built-in agent (JSON lines on stdin/stdout).")
    var agentCommand: String?
    @Option(help: "Messages per second allowed per connection.") var rate: Double = 10
    @Option(help: "Burst of messages allowed per connection.") var burst = 20
    @Option(help: "Delay between streamed words of the built-in agent, in milliseconds.") var wordDelayMs = 30
    @Option(help: "Seconds a session (and its running turn) waits for its client to reconnect.")
    var resumeGrace: Double = 30
    @Option(help: "Events a session keeps for a reconnecting client (also its send queue's bound).")
    var resumeBuffer = 1_000
    @OptionGroup var access: ServerAccessOptions

    func validate() throws {
        if port < 0 || port > 65535 { throw ValidationError("--port must be 0...65535") }
        if rate <= 0 || burst < 1 { throw ValidationError("--rate must be > 0 and --burst >= 1") }
        if let token, token.isEmpty { throw ValidationError("--token must not be empty") }
        if !(resumeGrace >= 0 && resumeGrace <= 86_400) { throw ValidationError("--resume-grace must be 0...86400 seconds") }
        if resumeBuffer < 1 || resumeBuffer > 1_000_000 { throw ValidationError("--resume-buffer must be 1...1000000 events") }
    }

    func run() async throws {
        signal(SIGPIPE, SIG_IGN)
        var logger = Logger(label: "agent-stream")
        logger.logLevel = .warning
        var config = WebSocketServerConfiguration(host: host, port: port)
        config.shutdownTimeout = .seconds(2)
        access.apply(to: &config)
        let server = WebSocketServer(configuration: config, logger: logger)
        let agent: any Agent = agentCommand.map { CommandAgent(command: $0) }
            ?? BuiltInAgent(wordDelay: .milliseconds(max(0, wordDelayMs)))
        let token = self.token, rate = self.rate, burst = self.burst
        var limits = SessionLimits()
        limits.grace = .milliseconds(Int64((resumeGrace * 1000).rounded()))
        limits.bufferEvents = resumeBuffer
        let sessionLimits = limits
        let registry = SessionRegistry { id, identity, registry in
            AgentSession(sessionID: id, identity: identity, agent: agent, rate: rate, burst: burst,
                         limits: sessionLimits, onExpired: { registry.remove($0) })
        }
        server.route(ChannelEndpoint.channelPath, authenticate: { request in
            if let token {
                guard let presented = request.bearerToken, ConstantTime.equals(presented, token) else {
                    return .unauthorized()
                }
            }
            guard let session = request.queryItems.first(where: { $0.name == "session_id" })?.value,
                  !session.isEmpty else {
                return .reject(.error(status: 400, message: "missing session_id query parameter",
                                      type: .invalidRequest, code: "missing_session_id"))
            }
            var userInfo = ["session_id": session]
            if let raw = request.queryItems.first(where: { $0.name == "last_seq" })?.value {
                guard let lastSequence = UInt64(raw) else {
                    return .reject(.error(status: 400, message: "last_seq must be a non-negative integer",
                                          type: .invalidRequest, code: "invalid_last_seq"))
                }
                userInfo["last_seq"] = String(lastSequence)
            }
            // A session belongs to the token it was opened with.
            guard registry.mayOpen(session, identity: request.bearerToken) else {
                return .reject(.error(status: 403, message: "session \(session) belongs to another token",
                                      type: .permission, code: "session_forbidden"))
            }
            return .accept(userInfo: userInfo)
        }) { connection in
            let sessionID = connection.userInfo["session_id"] ?? "?"
            let lastSequence = connection.userInfo["last_seq"].flatMap { UInt64($0) }
            let identity = connection.request?.bearerToken
            var expired = false
            while true {
                guard let (session, created) = registry.session(sessionID, identity: identity) else {
                    // Taken by another token between the check and now.
                    await connection.close(code: .policyViolation, reason: "session belongs to another token")
                    return
                }
                log("session \(sessionID) \(created ? "opened" : "resumed")")
                // Resuming a session that is gone (ended after its grace period, or before a restart).
                let failure = (created || expired) && lastSequence != nil ? "session_not_found" : nil
                if await session.serve(connection, lastSequence: created ? nil : lastSequence, resumeFailure: failure) {
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
        try await runUntilSignal(server, logger: server.logger)
    }
}
