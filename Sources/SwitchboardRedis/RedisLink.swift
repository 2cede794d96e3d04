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
///
/// With a Sentinel URL (``RedisURL/sentinels``), every connection attempt first asks the
/// sentinels for the master's address (``RedisSentinelDiscovery``), so a reconnection never
/// goes blindly to the old address, and checks with `ROLE` (after the handshake) that the server
/// is the master; a ``RedisSentinelWatcher`` (a pub/sub connection to one sentinel at a time)
/// hears `+switch-master` and moves the link at once. A link of role `.sentinel` is that
/// watcher's connection: it goes to the sentinels in turn.
final class RedisLink: @unchecked Sendable {
    // Safety: every member is touched only on `loop`'s thread.
    let loop: EventLoop
    let url: RedisURL
    let configuration: RedisConfiguration
    let logger: Logger
    weak var owner: RedisLinkOwner?

    /// What the link connects to.
    enum Role {
        /// The URL's server, or, for a Sentinel URL, the master the sentinels name.
        case server
        /// The URL's sentinels, in turn (one per attempt).
        case sentinel
    }
    let role: Role
    /// The server of the current connection (set when connected, nil when down).
    private(set) var address: RedisURL.Address?
    /// The sentinel to ask first (the last one that answered), or to connect to next.
    private var nextSentinel = 0
    /// Incremented by each connection attempt: a late result of an abandoned one is dropped.
    private var attempt = 0
    /// Whether the last handshake reply due is `ROLE`'s (to a master found through sentinels).
    private var roleCheckPending = false
    /// Follows `+switch-master` for a `.server` link of a Sentinel URL (started with it).
    private var watcher: RedisSentinelWatcher?

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
    /// Whether a connection was up at some point (false during the first attempts).
    private(set) var everConnected = false
    private var random = SystemRandomNumberGenerator()

    init(loop: EventLoop, url: RedisURL, configuration: RedisConfiguration, logger: Logger, role: Role = .server) {
        self.loop = loop
        self.url = url
        self.configuration = configuration
        self.logger = logger
        self.role = role
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
        if role == .server, let sentinels = url.sentinels {
            let watcher = RedisSentinelWatcher(loop: loop, url: url, configuration: configuration, logger: logger,
                                               masterName: sentinels.masterName)
            watcher.onSwitch = { [weak self] address in self?.masterSwitched(to: address) }
            self.watcher = watcher
            watcher.start()
        }
        connect()
    }

    /// The sentinels announced a new master: leave the current one (unless it is that one) and
    /// connect again now, without waiting for the backoff.
    private func masterSwitched(to newMaster: RedisURL.Address) {
        switch state {
        case .up, .handshaking:
            guard address != newMaster else { return }
            logger.info("the sentinels moved the Redis master", metadata: ["redis": "\(url)", "master": "\(newMaster)"])
            fail(RedisError(kind: .connectionLost,
                            message: "the sentinels moved master \(url.sentinels?.masterName ?? "") to \(newMaster)"))
            reconnectNow()
        case .waiting, .connecting:
            reconnectNow()
        case .idle, .closed:
            break
        }
    }

    /// Abandons a wait or an attempt in progress and connects now (backoff reset).
    private func reconnectNow() {
        switch state {
        case .waiting(let timer): timer.cancel()
        case .connecting(let task): task.cancel()
        default: return
        }
        failures = 0
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

    /// The owner got what it wanted from this connection (the watcher: its subscription
    /// confirmed): the backoff starts afresh after the next failure.
    func succeeded() {
        failures = 0
    }

    /// Closes for good (queued bytes are written first, briefly).
    func close() {
        watcher?.close()
        watcher = nil
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
        attempt &+= 1
        let thisAttempt = attempt
        weak let weakSelf = self
        enum Target { case fixed(RedisURL.Address), discover(RedisURL.Sentinels, first: Int) }
        let target: Target
        if let sentinels = url.sentinels, !sentinels.addresses.isEmpty {
            if role == .sentinel {
                let index = nextSentinel % sentinels.addresses.count
                nextSentinel = index + 1
                target = .fixed(sentinels.addresses[index])
            } else {
                target = .discover(sentinels, first: nextSentinel)
            }
        } else if url.sentinels != nil {
            target = .fixed(RedisURL.Address(host: "", port: url.port))  // fails below: no sentinels
        } else {
            target = .fixed(RedisURL.Address(host: url.host, port: url.port))
        }
        let sentinelTarget = role == .sentinel
        let task = Task {
            let address: RedisURL.Address
            let answered: Int?
            switch target {
            case .fixed(let fixed):
                address = fixed
                answered = nil
            case .discover(let sentinels, let first):
                switch await RedisSentinelDiscovery.master(of: sentinels, firstAsked: first, useTLS: url.useTLS,
                                                           configuration: configuration, loop: loop) {
                case .success(let found):
                    address = found.master
                    answered = found.sentinel
                case .failure(let error):
                    loop.execute {
                        guard let self = weakSelf, self.attempt == thisAttempt, case .connecting = self.state else { return }
                        self.down(error)
                    }
                    return
                }
            }
            do {
                guard !address.host.isEmpty else {
                    throw SwitchboardError(kind: .invalidArgument, message: "the Sentinel URL lists no sentinel")
                }
                let connection = try await StreamConnection.connect(
                    host: address.host, port: address.port, tls: url.useTLS ? configuration.tls : nil,
                    timeout: configuration.connectTimeout, outboundLimit: configuration.maximumOutboundBytes, on: loop)
                loop.execute {
                    guard let self = weakSelf, self.attempt == thisAttempt, case .connecting = self.state else {
                        connection.close(linger: .zero)
                        return
                    }
                    if let answered { self.nextSentinel = answered }
                    self.connected(connection, to: address)
                }
            } catch {
                let e = error as? SwitchboardError ?? SwitchboardError(kind: .cancelled, message: "cancelled")
                let what = url.sentinels == nil ? "Redis at \(url)"
                    : sentinelTarget ? "the sentinel at \(address) of \(url)"
                    : "the Redis master at \(address) named by the sentinels of \(url)"
                loop.execute {
                    guard let self = weakSelf, self.attempt == thisAttempt, case .connecting = self.state else { return }
                    self.down(RedisError(kind: .unavailable, message: "cannot connect to \(what): \(e.message)",
                                         underlying: e))
                }
            }
        }
        state = .connecting(task)
    }

    private func connected(_ connection: StreamConnection, to address: RedisURL.Address) {
        self.address = address
        parser = RESPParser(limits: configuration.parseLimits)
        connection.onRead = { [unowned self] bytes in received(bytes) }
        let place = url.sentinels == nil ? "\(url)" : "\(address) (\(url))"
        connection.onClose = { [unowned self] error in
            down(RedisError(kind: .connectionLost,
                            message: "connection to Redis at \(place) \(error.map { "failed: \($0.message)" } ?? "closed by the server")",
                            underlying: error))
        }
        var handshake: [UInt8] = []
        var replies = 0
        let toSentinel = role == .sentinel
        let (username, password) = toSentinel ? (url.sentinels?.username, url.sentinels?.password)
                                              : (url.username, url.password)
        if let password {
            let args = [Array("AUTH".utf8)] + (username.map { [Array($0.utf8)] } ?? []) + [Array(password.utf8)]
            RESPEncoder.append(command: args, to: &handshake)
            replies += 1
        }
        if url.database != 0 && !toSentinel {
            RESPEncoder.append(command: [Array("SELECT".utf8), Array(String(url.database).utf8)], to: &handshake)
            replies += 1
        }
        if let name = configuration.clientName, !toSentinel {
            RESPEncoder.append(command: [Array("CLIENT".utf8), Array("SETNAME".utf8), Array(name.utf8)], to: &handshake)
            replies += 1
        }
        // A master named by the sentinels may have been demoted since: `ROLE` says (last, so
        // that its reply is the last one due).
        roleCheckPending = !toSentinel && url.sentinels != nil
        if roleCheckPending {
            RESPEncoder.append(command: [Array("ROLE".utf8)], to: &handshake)
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
        // A sentinel connection counts as working once its owner says so (``succeeded()``): one
        // that accepts and then stays silent must not reset the backoff.
        if role != .sentinel { failures = 0 }
        let reconnected = everConnected
        everConnected = true
        logger.info("connected to Redis", metadata: ["redis": "\(url)", "server": "\(address.map(\.description) ?? "")",
                                                     "reconnected": "\(reconnected)"])
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
                if due == 1 && roleCheckPending {
                    roleCheckPending = false
                    guard case .array(let items) = value, let role = items.first?.string, role == "master" else {
                        let said = if case .array(let items) = value { items.first?.string ?? "?" } else { "?" }
                        fail(RedisError(kind: .unavailable,
                                        message: "Redis at \(address.map(\.description) ?? "?") is not the master "
                                            + "\(url.sentinels?.masterName ?? "") (ROLE: \(said.prefix(32))); asking the sentinels again"))
                        return
                    }
                } else if case .error(let message) = value {
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
        address = nil
        roleCheckPending = false
        failures += 1
        // A sentinel connection tries the next sentinel at once, and backs off only after a
        // whole round of them failed.
        let sentinelCount = url.sentinels?.addresses.count ?? 0
        let delay = role == .sentinel && sentinelCount > 1 && failures % sentinelCount != 0 ? .zero : backoff()
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
