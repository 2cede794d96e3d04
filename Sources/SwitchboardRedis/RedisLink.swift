import Logging
import Switchboard

/// What a ``RedisLink`` tells its owner. Called on the link's loop.
protocol RedisLinkOwner: AnyObject {
    /// Connected and authenticated: the owner may write.
    func linkUp(reconnected: Bool)
    /// A value arrived after the handshake.
    func linkReceived(_ value: RESPValue)
    /// The connection is gone (or could not be made); the link retries after a backoff
    /// unless it was closed.
    func linkDown(_ error: RedisError)
}

/// One Redis connection kept open: connects (TCP, TLS for `rediss`), sends `AUTH`, `SELECT`
/// and `CLIENT SETNAME`, parses replies, and reconnects with exponential backoff and jitter
/// after a failure. Loop-confined: every method runs on ``loop``.
final class RedisLink: @unchecked Sendable {
    // Safety: every member is touched only on `loop`'s thread.
    let loop: EventLoop
    let url: RedisURL
    let configuration: RedisConfiguration
    let logger: Logger
    weak var owner: RedisLinkOwner?

    private enum State {
        case idle
        case connecting(Task<Void, Never>)
        /// Connected; `handshakeReplies` replies to AUTH/SELECT/SETNAME still due.
        case handshaking(StreamConnection, handshakeReplies: Int)
        case up(StreamConnection)
        case waiting(EventLoopTimer)
        case closed
    }
    private var state = State.idle
    private var parser: RESPParser
    private var failures = 0
    private var everConnected = false
    private var random = SystemRandomNumberGenerator()

    init(loop: EventLoop, url: RedisURL, configuration: RedisConfiguration, logger: Logger) {
        self.loop = loop
        self.url = url
        self.configuration = configuration
        self.logger = logger
        parser = RESPParser(limits: configuration.parseLimits)
    }

    var isUp: Bool { if case .up = state { true } else { false } }
    var isConnecting: Bool {
        switch state {
        case .connecting, .handshaking: true
        default: false
        }
    }
    var isClosed: Bool { if case .closed = state { true } else { false } }

    /// Starts connecting if idle (a no-op otherwise).
    func start() {
        guard case .idle = state else { return }
        connect()
    }

    /// Writes `bytes` (one or more encoded commands); false if not up or over the queue limit.
    func write(_ bytes: [UInt8]) -> Bool {
        guard case .up(let connection) = state else { return false }
        return connection.write(bytes)
    }

    /// Drops the connection with `error` (the owner hears `linkDown`) and reconnects after the
    /// backoff.
    func fail(_ error: RedisError) {
        switch state {
        case .handshaking(let c, _), .up(let c):
            c.close(linger: .zero)
            down(error)
        default:
            break
        }
    }

    /// Closes for good (queued bytes are written first, briefly).
    func close() {
        switch state {
        case .connecting(let task): task.cancel()
        case .handshaking(let c, _), .up(let c): c.close()
        case .waiting(let timer): timer.cancel()
        case .idle, .closed: break
        }
        state = .closed
    }

    private func connect() {
        let url = url, configuration = configuration, loop = loop
        weak let weakSelf = self
        let task = Task {
            do {
                let connection = try await StreamConnection.connect(
                    host: url.host, port: url.port, tls: url.useTLS ? configuration.tls : nil,
                    timeout: configuration.connectTimeout, outboundLimit: configuration.maximumOutboundBytes, on: loop)
                loop.execute {
                    guard let self = weakSelf, case .connecting = self.state else {
                        connection.close(linger: .zero)
                        return
                    }
                    self.connected(connection)
                }
            } catch {
                let e = error as? SwitchboardError ?? SwitchboardError(kind: .cancelled, message: "cancelled")
                loop.execute {
                    guard let self = weakSelf, case .connecting = self.state else { return }
                    self.down(RedisError(kind: .unavailable, message: "cannot connect to Redis at \(url): \(e.message)",
                                         underlying: e))
                }
            }
        }
        state = .connecting(task)
    }

    private func connected(_ connection: StreamConnection) {
        parser = RESPParser(limits: configuration.parseLimits)
        connection.onRead = { [unowned self] bytes in received(bytes) }
        connection.onClose = { [unowned self] error in
            down(RedisError(kind: .connectionLost,
                            message: "connection to Redis at \(url) \(error.map { "failed: \($0.message)" } ?? "closed by the server")",
                            underlying: error))
        }
        var handshake: [UInt8] = []
        var replies = 0
        if let password = url.password {
            let args = [Array("AUTH".utf8)] + (url.username.map { [Array($0.utf8)] } ?? []) + [Array(password.utf8)]
            RESPEncoder.append(command: args, to: &handshake)
            replies += 1
        }
        if url.database != 0 {
            RESPEncoder.append(command: [Array("SELECT".utf8), Array(String(url.database).utf8)], to: &handshake)
            replies += 1
        }
        if let name = configuration.clientName {
            RESPEncoder.append(command: [Array("CLIENT".utf8), Array("SETNAME".utf8), Array(name.utf8)], to: &handshake)
            replies += 1
        }
        if replies == 0 {
            up(connection)
        } else {
            state = .handshaking(connection, handshakeReplies: replies)
            connection.write(handshake)
        }
    }

    private func up(_ connection: StreamConnection) {
        state = .up(connection)
        failures = 0
        let reconnected = everConnected
        everConnected = true
        logger.info("connected to Redis", metadata: ["redis": "\(url)", "reconnected": "\(reconnected)"])
        owner?.linkUp(reconnected: reconnected)
    }

    private func received(_ bytes: UnsafeRawBufferPointer) {
        parser.append(bytes)
        while true {
            let value: RESPValue?
            do {
                value = try parser.next()
            } catch {
                fail(RedisError(kind: .protocolError, message: "invalid reply from Redis at \(url): \(error)"))
                return
            }
            guard let value else { return }
            switch state {
            case .handshaking(let connection, let due):
                if case .error(let message) = value {
                    fail(RedisError(kind: .authentication, message: "Redis at \(url) refused the connection: \(message)"))
                    return
                }
                if due > 1 {
                    state = .handshaking(connection, handshakeReplies: due - 1)
                } else {
                    up(connection)
                }
            case .up:
                owner?.linkReceived(value)
            default:
                return
            }
        }
    }

    private func down(_ error: RedisError) {
        switch state {
        case .closed, .idle, .waiting:
            return
        default:
            break
        }
        failures += 1
        let delay = backoff()
        logger.warning("Redis connection down", metadata: ["redis": "\(url)", "error": "\(error.message)",
                                                           "retryInMilliseconds": "\(delay.milliseconds)"])
        let timer = loop.schedule(after: delay) { [weak self] in
            guard let self, case .waiting = self.state else { return }
            self.connect()
        }
        state = .waiting(timer)
        owner?.linkDown(error)
    }

    /// initial × 2^(failures-1), at most the maximum, times a random 50–100 %.
    private func backoff() -> Duration {
        let initial = configuration.initialReconnectDelay.milliseconds
        let maximum = max(initial, configuration.maximumReconnectDelay.milliseconds)
        let exponent = min(failures - 1, 30)
        let (scaled, overflow) = initial.multipliedReportingOverflow(by: 1 << exponent)
        let base = overflow ? maximum : min(maximum, scaled)
        let jittered = base / 2 + Int64.random(in: 0...max(0, base / 2), using: &random)
        return .milliseconds(jittered)
    }
}

extension Duration {
    /// Whole milliseconds (rounded down).
    var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
