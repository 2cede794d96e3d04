import ArgumentParser
import Foundation
import Logging
import Switchboard
import SwitchboardCore
import ChatRoomCore
import ExampleSupport

/// `chat-room serve`: the chat server.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the chat server (the default command).")

    @Option(help: "Address to bind.") var host = "127.0.0.1"
    @Option(help: "Port to listen on (0 = ephemeral; the bound port is printed).") var port = 8080
    @Option(help: "SQLite database file for history (':memory:' keeps it in memory).") var db = "chat-room.sqlite"
    @Option(help: "Require this bearer token (Authorization header or ?token=). Default: $CHAT_TOKEN.") var token: String?
    @Option(help: "PEM certificate chain file (enables https/wss).") var tlsCert: String?
    @Option(help: "PEM private key file.") var tlsKey: String?
    @Option(help: "Lines per second each connection may send, on average (token-bucket refill rate).") var rate: Double = 20
    @Option(help: "Lines a connection may send at once before the rate applies (token-bucket size).") var burst: Double = 40
    @Flag(help: "Decline permessage-deflate (accepted by default: no context takeover, shared zlib streams).") var noDeflate = false

    func validate() throws {
        if (tlsCert == nil) != (tlsKey == nil) { throw ValidationError("--tls-cert and --tls-key go together") }
        if !(0...65535).contains(port) { throw ValidationError("--port must be 0...65535") }
        if !(rate > 0 && rate.isFinite) { throw ValidationError("--rate must be a positive number") }
        if !(burst >= 1 && burst.isFinite) { throw ValidationError("--burst must be at least 1") }
    }

    func run() async throws {
        let requiredToken = token ?? ProcessInfo.processInfo.environment["CHAT_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        var config = WebSocketServerConfiguration(host: host, port: port)
        config.shutdownTimeout = .seconds(5)
        if !noDeflate { config.connection.compression = .default }
        if let tlsCert, let tlsKey {
            config.tls = TLSServerConfiguration(certificateChainFile: tlsCert, privateKeyFile: tlsKey)
        }
        var logger = Logger(label: "chat-room")
        logger.logLevel = .warning

        let store: HistoryStore
        do { store = try HistoryStore(path: db) } catch {
            throw ValidationError("\(error)")
        }
        let server = WebSocketServer(configuration: config, logger: logger)
        let directory = RoomDirectory(server: server)

        server.onHTTPRequest { head in
            switch (head.method, head.path) {
            case ("GET", "/"), ("HEAD", "/"):
                return HTTPResponse(status: 200,
                                    headers: ["Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store"],
                                    body: Array(WebPage.html.utf8))
            case ("GET", "/healthz"):
                return .json(status: 200, #"{"status":"ok"}"#)
            case (_, "/"):
                return .error(status: 405, message: "method not allowed", type: .invalidRequest, code: "method_not_allowed")
            default:
                return nil
            }
        }
        let authenticate: (@Sendable (WebSocketUpgradeRequest) async -> WebSocketAuthDecision)?
        if let requiredToken {
            authenticate = { request in
                guard let presented = request.bearerToken, ConstantTime.equals(presented, requiredToken) else {
                    return .unauthorized()
                }
                return .accept()
            }
        } else {
            authenticate = nil
        }
        server.route("/v1/ws", authenticate: authenticate) { connection in
            var session = ChatSession(connection: connection, server: server, directory: directory, store: store,
                                      limiter: RateLimiter(ratePerSecond: rate, burst: burst))
            try await session.run()
        }

        let secure = config.tls != nil
        let shownHost = host.contains(":") ? "[\(host)]" : host
        let announce = Task {
            guard let bound = try? await server.listeningPort else { return }
            // First stdout line, unbuffered: scripts and tests wait for it.
            FileHandle.standardOutput.write(Data(
                "chat-room listening on \(secure ? "https" : "http")://\(shownHost):\(bound)  (WebSocket: \(secure ? "wss" : "ws")://\(shownHost):\(bound)/v1/ws)\n".utf8))
        }
        defer { announce.cancel() }
        do {
            // SIGTERM or SIGINT: stop accepting, close every connection with 1001, wait for
            // them (at most `shutdownTimeout`), then return.
            try await runUntilSignal(server, logger: logger)
        } catch {
            await store.close()
            throw error
        }
        FileHandle.standardOutput.write(Data("chat-room stopped\n".utf8))
        await store.close()
    }
}
