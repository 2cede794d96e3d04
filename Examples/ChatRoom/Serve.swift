import ArgumentParser
import Foundation
import Logging
import Switchboard
import SwitchboardCore
import ChatRoomCore
import ExampleSupport
import SwitchboardRedis

/// `chat-room serve`: the chat server.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the chat server (the default command).")

    @Option(help: "Address to bind.") var host = "127.0.0.1"
    @Option(help: "Port to listen on (0 = ephemeral; the bound port is printed).") var port = 8080
    @Option(help: "SQLite database file for history (':memory:' keeps it in memory). Default: chat-room.sqlite. Not with --redis.")
    var db: String?
    @Option(help: "Share rooms (events, presence, history) with every chat-room given the same Redis: redis://[user:password@]host[:port][/db], rediss://, through Sentinel: redis-sentinel://host:port[,host:port…]/MASTER_NAME[/db], or a Redis Cluster: redis-cluster://host:port[,host:port…] (rediss-cluster://; each room on the shard of its slot).")
    var redis: String?
    @Option(help: "Prefix of every Redis key and channel (with --redis).") var redisPrefix = "switchboard:"
    @Option(help: "Seconds after which a dead server's users leave the rooms (with --redis: its heartbeat's TTL).")
    var presenceTtl: Int = 15
    @Option(help: "Messages each room's Redis stream keeps (with --redis; 1...1000000); older ones are trimmed and no longer paged back to.")
    var redisHistory = ChatLimits.defaultRedisHistory
    @Option(help: "Replicas that must acknowledge a message (Redis WAIT) before its sender is told it is stored (with --redis; 0...16). Default: 1 when the master has a replica online at start-up, else 0. Fixed at start-up.")
    var redisMinReplicasAck: Int?
    @Option(help: "Require this bearer token (Authorization header or ?token=). Default: $CHAT_TOKEN.") var token: String?
    @Option(help: "PEM certificate chain file (enables https/wss).") var tlsCert: String?
    @Option(help: "PEM private key file.") var tlsKey: String?
    @Option(help: "Lines per second each connection may send, on average (token-bucket refill rate).") var rate: Double = 20
    @Option(help: "Lines a connection may send at once before the rate applies (token-bucket size).") var burst: Double = 40
    @Option(help: "Rooms one connection may be in at once; a join beyond gets 'too_many_rooms'.")
    var maxRoomsPerConnection = ChatLimits.defaultMaxRoomsPerConnection
    @Flag(help: "Decline permessage-deflate (accepted by default: no context takeover, shared zlib streams).") var noDeflate = false
    @OptionGroup var access: ServerAccessOptions
    /// Signed tokens (`--jwt-secret-file` | `--jwt-public-key` | `--jwks-file`): each user's own
    /// identity instead of one shared `--token`.
    @OptionGroup var tokens: TokenOptions
    /// `--api-key-file`: enables the HTTP API (docs/chat-protocol.md "HTTP API") for backends
    /// holding the key, and protects `GET /metrics`.
    @OptionGroup var apiKey: APIKeyOptions

    /// `--token`, else `$CHAT_TOKEN` (empty: none).
    private var sharedToken: String? {
        token ?? ProcessInfo.processInfo.environment["CHAT_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
    }

    func validate() throws {
        // Exit 64 with either shared token beside a token key.
        try tokens.validate(sharedToken: sharedToken)
        if (tlsCert == nil) != (tlsKey == nil) { throw ValidationError("--tls-cert and --tls-key go together") }
        if !(0...65535).contains(port) { throw ValidationError("--port must be 0...65535") }
        if !(rate > 0 && rate.isFinite) { throw ValidationError("--rate must be a positive number") }
        if !(burst >= 1 && burst.isFinite) { throw ValidationError("--burst must be at least 1") }
        if redis != nil && db != nil {
            throw ValidationError("--redis and --db exclude each other: with --redis, history is kept in Redis")
        }
        if maxRoomsPerConnection < 1 { throw ValidationError("--max-rooms-per-connection must be at least 1") }
        if !(1...86_400).contains(presenceTtl) { throw ValidationError("--presence-ttl must be 1...86400 seconds") }
        if !(1...ChatLimits.maxRedisHistory).contains(redisHistory) {
            throw ValidationError("--redis-history must be 1...\(ChatLimits.maxRedisHistory) messages")
        }
        if let redisMinReplicasAck {
            if redis == nil { throw ValidationError("--redis-min-replicas-ack needs --redis") }
            if !(0...16).contains(redisMinReplicasAck) { throw ValidationError("--redis-min-replicas-ack must be 0...16") }
        }
        if let redis {
            let url: RedisURL
            do { url = try RedisURL(redis) } catch { throw ValidationError("--redis: \(error)") }
            // A room's keys and channel share the hash tag `{room:room:<room>}`: the prefix may not
            // bring its own.
            if url.cluster != nil && redisPrefix.contains(where: { $0 == "{" || $0 == "}" }) {
                throw ValidationError("--redis-prefix: with a Redis Cluster the prefix may not contain { or } "
                                      + "(each room's keys carry their own hash tag)")
            }
        }
    }

    func run() async throws {
        let requiredToken = sharedToken
        var config = WebSocketServerConfiguration(host: host, port: port)
        config.shutdownTimeout = .seconds(5)
        access.apply(to: &config)
        if !noDeflate { config.connection.compression = .default }
        if let tlsCert, let tlsKey {
            config.tls = TLSServerConfiguration(certificateChainFile: tlsCert, privateKeyFile: tlsKey)
        }
        var logger = Logger(label: "chat-room")
        logger.logLevel = .warning

        var redisSetup: (url: RedisURL, backplane: RedisTopicBackplane)?
        if let redis {
            let url = try RedisURL(redis)
            var redisLogger = Logger(label: "chat-room.redis")
            redisLogger.logLevel = .warning
            let backplane = try RedisTopicBackplane(url: url, prefix: redisPrefix, logger: redisLogger)
            config.backplane = backplane
            redisSetup = (url, backplane)
        }
        let key = try apiKey.loadKey()
        // Reports to the Prometheus registry that `GET /metrics` serves (MetricsSupport trait).
        let server = PrometheusMetrics.makeServer(configuration: config, logger: logger)
        let directory = RoomDirectory(server: server)
        let backend: any ChatBackend
        if let redisSetup {
            var redisLogger = Logger(label: "chat-room.redis")
            redisLogger.logLevel = .warning
            let shared = try RedisChatBackend(server: server, directory: directory, url: redisSetup.url,
                                              backplane: redisSetup.backplane, prefix: redisPrefix,
                                              presenceTTL: .seconds(presenceTtl), historyLength: redisHistory,
                                              logger: redisLogger)
            do {
                _ = try await shared.configureReplicaAcks(redisMinReplicasAck)
            } catch {
                await shared.close()
                throw ValidationError("\(error)")
            }
            shared.start()
            backend = shared
        } else {
            do {
                backend = LocalChatBackend(server: server, directory: directory,
                                           store: try HistoryStore(path: db ?? "chat-room.sqlite"))
            } catch {
                throw ValidationError("\(error)")
            }
        }
        let backplane = redisSetup?.backplane
        let redisBackend = backend as? RedisChatBackend

        var authenticate: (@Sendable (WebSocketUpgradeRequest) async -> WebSocketAuthDecision)?
        var verifyRefresh: RefreshVerifier?
        var verifyToken: APIAccess.TokenVerifier?
        let tokensEnabled = tokens.isEnabled
        #if JWTSupport
        if let authenticator = try await tokens.makeAuthenticator() {
            // Bearer token or ?token=: 401 unless it verifies; its `sub`, `name` and other claims
            // become the connection's userInfo, its `exp` the connection's deadline (4001).
            authenticate = { request in await authenticator.authenticate(request) }
            verifyRefresh = { token in
                do throws(JWTVerificationError) {
                    let verified = try await authenticator.verify(token)
                    return .success(RefreshedToken(subject: verified.subject, expiresAt: verified.expiresAt))
                } catch {
                    return .failure(.invalidToken(error.message))
                }
            }
            verifyToken = { token in
                do throws(JWTVerificationError) {
                    return .success(try await authenticator.verify(token).claims)
                } catch {
                    return .failure(APIAccess.TokenRefusal(code: error.code, message: error.message))
                }
            }
            tokens.reloadOnHangUp(authenticator)
        }
        #endif
        // With tokens, set above (their flags are refused at validation when built without
        // JWTSupport, and beside --token).
        if !tokensEnabled, let requiredToken {
            authenticate = { request in
                guard let presented = request.bearerToken, ConstantTime.equals(presented, requiredToken) else {
                    return .unauthorized()
                }
                return .accept()
            }
        }
        let refresh = verifyRefresh
        // The HTTP API: on with --api-key-file and/or the token flags (a token then needs the
        // `publish` scope), else its paths are 404s.
        let access = APIAccess(key: key, verifyToken: verifyToken)
        let api = ChatAPI(backend: backend, access: access)
        server.handleHTTP { request in
            let head = request.head
            switch (head.method, head.path) {
            case ("GET", "/"), ("HEAD", "/"):
                return HTTPResponse(status: 200,
                                    headers: ["Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store"],
                                    body: Array(WebPage.html.utf8))
            case ("GET", "/healthz"):
                guard let backplane, let redisBackend else { return .json(status: 200, #"{"status":"ok"}"#) }
                // With --redis: 503 only while Redis does not serve this node (its connection
                // down, or its users not written again yet after a reconnection; in a cluster:
                // no shard answers); 200 "degraded" while pub/sub is down, fewer replicas than
                // --redis-min-replicas-ack are online, or (cluster) a shard does not answer.
                let health = await redisBackend.health(backplaneConnected: backplane.isConnected)
                return .json(status: health.status, health.json)
            case ("GET", PrometheusMetrics.path):
                // Counters only; with --api-key-file the key is required (401 without), else open.
                if case .denied(let response) = access.checkKey(head) { return response }
                return PrometheusMetrics.response()
            case (_, "/"):
                return .error(status: 405, message: "method not allowed", type: .invalidRequest, code: "method_not_allowed")
            default:
                // The backend API (POST/GET /v1/rooms/{room}/messages), or 404.
                return await api.respond(to: request)
            }
        }
        server.route("/v1/ws", authenticate: authenticate) { connection in
            var session = ChatSession(connection: connection, server: server, backend: backend,
                                      limiter: RateLimiter(ratePerSecond: rate, burst: burst),
                                      maxRooms: maxRoomsPerConnection,
                                      identity: tokensEnabled ? ChatIdentity(userInfo: connection.userInfo) : nil,
                                      verifyRefresh: refresh)
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
            await backend.close()
            throw error
        }
        FileHandle.standardOutput.write(Data("chat-room stopped\n".utf8))
        await backend.close()
    }
}
