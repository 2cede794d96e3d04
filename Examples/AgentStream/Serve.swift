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
        abstract: "Serve /v1/ws: one session per connection, one agent turn per message.")

    @Option(help: "Address to bind.") var host = "127.0.0.1"
    @Option(help: "Port to listen on (0 = ephemeral; the bound port is printed).") var port = 8090
    @Option(help: "Require this bearer token (Authorization header or ?token=).") var token: String?
    @Option(help: "Run this command per prompt instead of the built-in agent (JSON lines on stdin/stdout).")
    var agentCommand: String?
    @Option(help: "Messages per second allowed per connection.") var rate: Double = 10
    @Option(help: "Burst of messages allowed per connection.") var burst = 20
    @Option(help: "Delay between streamed words of the built-in agent, in milliseconds.") var wordDelayMs = 30

    func validate() throws {
        if port < 0 || port > 65535 { throw ValidationError("--port must be 0...65535") }
        if rate <= 0 || burst < 1 { throw ValidationError("--rate must be > 0 and --burst >= 1") }
        if let token, token.isEmpty { throw ValidationError("--token must not be empty") }
    }

    func run() async throws {
        signal(SIGPIPE, SIG_IGN)
        var logger = Logger(label: "agent-stream")
        logger.logLevel = .warning
        var config = WebSocketServerConfiguration(host: host, port: port)
        config.shutdownTimeout = .seconds(2)
        let server = WebSocketServer(configuration: config, logger: logger)
        let agent: any Agent = agentCommand.map { CommandAgent(command: $0) }
            ?? BuiltInAgent(wordDelay: .milliseconds(max(0, wordDelayMs)))
        let token = self.token, rate = self.rate, burst = self.burst
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
            return .accept(userInfo: ["session_id": session])
        }) { connection in
            let sessionID = connection.userInfo["session_id"] ?? "?"
            log("session \(sessionID) opened")
            let session = AgentSession(connection: connection, sessionID: sessionID, agent: agent,
                                       rate: rate, burst: burst)
            await session.run()
        }
        let announce = Task {
            guard let bound = try? await server.listeningPort else { return }
            out("agent-stream listening on ws://\(host):\(bound)\(ChannelEndpoint.channelPath)\n")
        }
        defer { announce.cancel() }
        try await runUntilSignal(server, logger: server.logger)
    }
}
