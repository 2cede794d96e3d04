import ArgumentParser
import Foundation
import Logging
import Switchboard
import SwitchboardCore
import SwitchboardRedis

/// Echoes every text and binary message unchanged, on every path but `/broadcast`, which relays
/// each message to every other `/broadcast` client. The testee for Autobahn server runs and for
/// benchmarks (`Benchmarks/run.sh`). With `--redis URL`, `/broadcast` spans every echo-server
/// given the same Redis (a `RedisTopicBackplane`): the two-node fan-out benchmark.
@main
struct EchoServer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "echo-server", abstract: "WebSocket echo server (Autobahn testee, benchmark target).")

    @Option(help: "Address to bind.") var host = "127.0.0.1"
    @Option(help: "Port to listen on (0 = ephemeral; the bound port is printed).") var port = 9001
    @Option(help: "PEM certificate chain file (enables wss).") var tlsCert: String?
    @Option(help: "PEM private key file.") var tlsKey: String?
    @Option(help: "File whose first line is the passphrase of an encrypted --tls-key.") var tlsKeyPassphraseFile: String?
    @Option(help: "Require client certificates issued by a CA of this PEM file (mutual TLS; needs --tls-cert).")
    var tlsClientCa: String?
    @Option(help: "Highest TLS version to accept: 1.2 or 1.3 (default 1.3).") var tlsMaxVersion: String?
    @Option(help: "Largest message accepted, in bytes.") var maxMessageSize = 16 << 20
    @Option(help: "Event loops (default: one per core).") var loops: Int?
    @Option(help: "Seconds between keepalive pings (default 20; 0 turns keepalive off).") var pingInterval: Double?
    @Option(help: "Seconds a keepalive ping may go unanswered (default 20).") var pongTimeout: Double?
    @Option(help: "Seconds to wait for the peer's close frame after ours (default 10).") var closeTimeout: Double?
    @Option(help: "Seconds queued bytes may wait while the peer takes none before the connection is reset (default 20; 0 turns it off).")
    var writeStallTimeout: Double?
    @Option(help: "Bytes queued for a socket above which sending waits (default 1 MiB); the low-water mark is a quarter of it.")
    var outboundHighWaterMark: Int?
    @Flag(help: "Answer GET /stats (plain HTTP) with the server's statistics as JSON: open connections, queued bytes, write-stall closes.")
    var stats = false
    @Option(help: "Relay /broadcast through this Redis to every echo-server given the same one: redis://[user:password@]host[:port][/db], rediss://, or through Sentinel: redis-sentinel://host:port[,host:port…]/MASTER_NAME[/db].")
    var redis: String?
    @Option(help: "Prefix of the Redis channels (with --redis).") var redisPrefix = "switchboard:"
    @Option(help: "Handler style: 'tasks' (a task per connection iterating messages()) or 'callbacks' (WebSocketCallbacks, no task per connection).")
    var api: API = .tasks

    @Flag(help: "Decline permessage-deflate (accepted by default, without context takeover).") var noDeflate = false
    @Flag(help: "Compress with context takeover and dedicated zlib streams per connection instead of the shared per-loop streams.")
    var contextTakeover = false

    enum API: String, ExpressibleByArgument { case tasks, callbacks }

    func validate() throws {
        if (tlsCert == nil) != (tlsKey == nil) { throw ValidationError("--tls-cert and --tls-key go together") }
        if tlsCert == nil && (tlsClientCa != nil || tlsKeyPassphraseFile != nil || tlsMaxVersion != nil) {
            throw ValidationError("--tls-client-ca, --tls-key-passphrase-file and --tls-max-version need --tls-cert")
        }
        if let tlsMaxVersion, !["1.2", "1.3"].contains(tlsMaxVersion) {
            throw ValidationError("--tls-max-version is 1.2 or 1.3")
        }
        if maxMessageSize < 1 { throw ValidationError("--max-message-size must be positive") }
        if let pingInterval, !(0...86_400).contains(pingInterval) { throw ValidationError("--ping-interval must be 0…86400 seconds") }
        if let pongTimeout, !(0.001...86_400).contains(pongTimeout) { throw ValidationError("--pong-timeout must be 0.001…86400 seconds") }
        if let closeTimeout, !(0.001...86_400).contains(closeTimeout) { throw ValidationError("--close-timeout must be 0.001…86400 seconds") }
        if let writeStallTimeout, !(0...86_400).contains(writeStallTimeout) {
            throw ValidationError("--write-stall-timeout must be 0…86400 seconds")
        }
        if let outboundHighWaterMark, !(4...(1 << 30)).contains(outboundHighWaterMark) {
            throw ValidationError("--outbound-high-water-mark must be 4…1073741824 bytes")
        }
        if noDeflate && contextTakeover { throw ValidationError("--context-takeover needs compression: drop --no-deflate") }
        if let redis {
            do { _ = try RedisURL(redis) } catch { throw ValidationError("--redis: \(error)") }
        }
    }

    func run() async throws {
        var config = WebSocketServerConfiguration(host: host, port: port)
        config.connection.protocolLimits = WebSocketProtocolLimits(maxFrameSize: maxMessageSize,
                                                                   maxMessageSize: maxMessageSize)
        config.loopCount = loops
        if !noDeflate { config.connection.compression = contextTakeover ? .contextTakeover : .default }
        config.shutdownTimeout = .seconds(2)
        if let pingInterval {
            config.connection.pingInterval = pingInterval > 0 ? .seconds(pingInterval) : nil
        }
        if let pongTimeout { config.connection.pongTimeout = .seconds(pongTimeout) }
        if let closeTimeout { config.connection.closeTimeout = .seconds(closeTimeout) }
        if let writeStallTimeout {
            config.connection.writeStallTimeout = writeStallTimeout > 0 ? .seconds(writeStallTimeout) : nil
        }
        if let outboundHighWaterMark {
            config.connection.outboundHighWaterMark = outboundHighWaterMark
            config.connection.outboundLowWaterMark = outboundHighWaterMark / 4
            config.connection.outboundLimit = max(config.connection.outboundLimit, outboundHighWaterMark)
        }
        if let tlsCert, let tlsKey {
            config.tls = TLSServerConfiguration(
                certificateChainFile: tlsCert, privateKeyFile: tlsKey,
                maximumVersion: tlsMaxVersion == "1.2" ? .tls12 : nil,
                privateKeyPassphrase: try tlsKeyPassphraseFile.map { path throws(SwitchboardError) in
                    try TLSPassphrase(contentsOfFile: path)
                },
                clientCertificates: tlsClientCa.map { .required(trustedCAFile: $0) } ?? .notRequested)
        }
        var logger = Logger(label: "echo-server")
        logger.logLevel = .warning
        if let redis {
            var redisLogger = Logger(label: "echo-server.redis")
            redisLogger.logLevel = .warning
            config.backplane = try RedisTopicBackplane(url: RedisURL(redis), prefix: redisPrefix, logger: redisLogger)
        }
        let server = WebSocketServer(configuration: config, logger: logger)
        if stats {
            server.onHTTPRequest { [server] head in
                guard head.path == "/stats" else { return nil }
                let s = server.statistics
                return .json(status: 200, "{\"openConnections\":\(s.openConnections),\"queuedBytes\":\(s.queuedBytes),"
                    + "\"writeStallCloses\":\(s.writeStallCloses),\"messagesIn\":\(s.messagesIn)}")
            }
        }
        // Fan-out benchmark: every message on /broadcast goes to every other /broadcast client
        // (with --redis, on every echo-server sharing the Redis).
        switch api {
        case .tasks:
            server.route("/broadcast") { [server] connection in
                server.subscribe(connection, to: "broadcast")
                // With --redis: until Redis confirmed the topic's subscription (true at once
                // without a backplane; false while Redis is unreachable, and we relay anyway).
                _ = await server.waitUntilReceivingFromOtherProcesses("broadcast")
                for await message in connection.messages() {
                    await server.publish(message, to: "broadcast", excluding: connection)
                }
            }
        case .callbacks:
            // No task to wait in: the backplane subscribes in the background on the first
            // subscriber, and messages from other processes flow once Redis confirmed it.
            server.route("/broadcast", callbacks: WebSocketCallbacks(onOpen: { [server] connection in
                server.subscribe(connection, to: "broadcast")
            }, onMessage: { [server] connection, message in
                server.publishNow(message, to: "broadcast", excluding: connection)
            }))
        }
        switch api {
        case .tasks:
            server.route("*") { connection in
                for await message in connection.messages() {
                    try await connection.send(message)
                }
            }
        case .callbacks:
            server.route("*", callbacks: WebSocketCallbacks(onMessage: { connection, message in
                do {
                    _ = try connection.sendNow(message)
                } catch {
                    // Closing or closed: the connection's close status says why; nothing to echo to.
                }
            }))
        }
        // `run()` serves until its task is cancelled, then shuts down gracefully (1001 to every
        // connection, at most `shutdownTimeout`).
        let serving = Task { try await server.run() }
        let bound = try await server.listeningPort
        // Printed once SIGTERM and SIGINT are caught (a script may stop the server as soon as it
        // reads the line), unbuffered, so scripts waiting for this line see it at once.
        await ShutdownSignal.wait {
            FileHandle.standardOutput.write(Data("echo-server listening on \(config.tls == nil ? "ws" : "wss")://\(host):\(bound)\n".utf8))
        }
        serving.cancel()
        try await serving.value
    }
}
