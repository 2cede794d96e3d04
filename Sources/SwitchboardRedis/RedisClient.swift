import Logging
import Switchboard

/// A Redis client on Switchboard's event loops: RESP2 commands, pipelined on one connection,
/// each answered in order by an `async` result.
///
/// ```swift
/// let redis = try RedisClient(url: RedisURL("redis://localhost:6379"))
/// try await redis.send("SET", "greeting", "hello")
/// let value = try await redis.send("GET", "greeting").string   // "hello"
/// ```
///
/// Connection: opened by the first command (or ``connect()``); `AUTH` and `SELECT` from the
/// URL are sent first. When it is lost, commands that were sent fail with `.connectionLost`
/// (they may have run), and the client reconnects by itself with exponential backoff; while it
/// is disconnected, new commands fail at once with `.unavailable` instead of waiting. Commands
/// issued while a connection is being opened wait for it.
///
/// Bounded: at most ``RedisConfiguration/maximumPendingCommands`` unanswered commands and
/// ``RedisConfiguration/maximumOutboundBytes`` queued bytes (beyond: `.limitExceeded`), and
/// replies within ``RedisConfiguration/parseLimits``. A command unanswered for
/// ``RedisConfiguration/commandTimeout`` closes the connection (`.timedOut`).
///
/// Sentinel (a `redis-sentinel://` or `rediss-sentinel://` ``RedisURL``): each connection
/// attempt asks the sentinels in turn for the master (`SENTINEL get-master-addr-by-name`, each
/// answer within ``RedisConfiguration/sentinelTimeout``), connects to it and checks that `ROLE`
/// says `master` (else the attempt fails with `.unavailable` and the sentinels are asked again
/// after the backoff). A lost connection is never reopened to the old address without asking
/// again. A pub/sub connection to one sentinel at a time (the next one when it is lost) hears
/// `+switch-master` and moves the connection to the new master at once. ``serverAddress`` is the
/// master in use. ``RedisSubscriber``, ``RedisTopicBackplane`` and ``RedisTopicEmitter`` behave
/// the same.
///
/// Cancelling the task awaiting a command does not unsend it; the task still waits for the reply.
/// Logs (swift-log) name the server by its URL with the password redacted.
public final class RedisClient: Sendable {
    let core: RedisClientCore

    /// A client for `url` (not connected yet). `group` provides the event loop (the shared one
    /// by default); state changes (connected, reconnected, disconnected) go to `onStateChange`,
    /// on the client's loop: keep it short. A Redis Cluster URL (`redis-cluster://`) throws
    /// `.invalidArgument`: use ``RedisClusterClient``, which routes each command to its node.
    public init(url: RedisURL, configuration: RedisConfiguration = RedisConfiguration(),
                group: EventLoopGroup? = nil, logger: Logger = Logger(label: "switchboard.redis"),
                onStateChange: (@Sendable (RedisConnectionState) -> Void)? = nil) throws(RedisError) {
        guard url.cluster == nil else { throw RedisError.clusterNotSupported(url) }
        let loop: EventLoop
        do {
            loop = try (group ?? EventLoopGroup.shared).next()
        } catch {
            throw RedisError(kind: .unavailable, message: "no event loop: \(error)")
        }
        core = RedisClientCore(link: RedisLink(loop: loop, url: url, configuration: configuration, logger: logger),
                               onStateChange: onStateChange)
    }

    deinit {
        let core = core
        core.link.loop.execute { core.close() }
    }

    /// The server's URL (its description hides the password).
    public var url: RedisURL { core.link.url }

    /// Opens the connection now and waits until it is ready (or fails).
    public func connect() async throws(RedisError) {
        _ = try await send(["PING"])
    }

    /// Sends a command (name and arguments) and returns its reply. An error reply throws
    /// `.server` with Redis's message.
    @discardableResult
    public func send(_ arguments: String...) async throws(RedisError) -> RESPValue {
        try await send(arguments)
    }

    /// Sends a command given as strings.
    @discardableResult
    public func send(_ arguments: [String]) async throws(RedisError) -> RESPValue {
        try await send(bytes: arguments.map { Array($0.utf8) })
    }

    /// Sends a command whose arguments are raw bytes (binary-safe).
    @discardableResult
    public func send(bytes arguments: [[UInt8]]) async throws(RedisError) -> RESPValue {
        guard !arguments.isEmpty else { throw RedisError(kind: .invalidArgument, message: "empty command") }
        var bytes: [UInt8] = []
        RESPEncoder.append(command: arguments, to: &bytes)
        let encoded = bytes
        let core = core
        let result: Result<RESPValue, RedisError> = await withCheckedContinuation { c in
            core.link.loop.execute { core.send(encoded) { c.resume(returning: $0) } }
        }
        return try result.get()
    }

    /// Sends `commands` (each a non-empty list of arguments) in one write, so that no other
    /// command of this client comes between them, and returns the last one's reply. The first
    /// error among them (an error reply of an earlier command included) is the result: a Redis
    /// Cluster client sends `ASKING` and the redirected command this way.
    func sendBackToBack(_ commands: [[[UInt8]]]) async -> Result<RESPValue, RedisError> {
        guard !commands.isEmpty, commands.allSatisfy({ !$0.isEmpty }) else {
            return .failure(RedisError(kind: .invalidArgument, message: "empty command"))
        }
        var bytes: [UInt8] = []
        for command in commands { RESPEncoder.append(command: command, to: &bytes) }
        let encoded = bytes
        let count = commands.count
        let core = core
        return await withCheckedContinuation { c in
            core.link.loop.execute {
                // Called in order on the loop: the earlier replies' first error, then the last.
                var firstError: RedisError?
                var replies: [RedisClientCore.Reply] = []
                for _ in 1..<count {
                    replies.append { result in
                        if case .failure(let error) = result, firstError == nil { firstError = error }
                    }
                }
                replies.append { result in c.resume(returning: firstError.map { Result<RESPValue, RedisError>.failure($0) } ?? result) }
                core.send(encoded, replies: replies)
            }
        }
    }

    /// Whether the connection is up now.
    public var isConnected: Bool {
        get async {
            let core = core
            return await withCheckedContinuation { c in core.link.loop.execute { c.resume(returning: core.link.isUp) } }
        }
    }

    /// The server the connection is up to now, nil while disconnected. For a Sentinel URL, the
    /// master the sentinels named and whose `ROLE` said `master` when connecting; to ask that
    /// master about its replicas, send `ROLE` or `INFO replication` (the chat-room's health check
    /// does).
    public var serverAddress: RedisURL.Address? {
        get async {
            let core = core
            return await withCheckedContinuation { c in
                core.link.loop.execute { c.resume(returning: core.link.isUp ? core.link.address : nil) }
            }
        }
    }

    /// Closes the connection; waiting commands fail with `.closed`. The client cannot be reused.
    public func close() async {
        let core = core
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            core.link.loop.execute {
                core.close()
                c.resume()
            }
        }
    }
}

/// The loop-confined side of ``RedisClient``: the replies awaited, in order.
final class RedisClientCore: RedisLinkOwner, @unchecked Sendable {
    // Safety: every member is touched only on `link.loop`'s thread.
    /// Called once with the command's reply or error, on the loop.
    typealias Reply = (Result<RESPValue, RedisError>) -> Void

    let link: RedisLink
    /// State changes, on the loop (set before the first command).
    var onStateChange: (@Sendable (RedisConnectionState) -> Void)?
    /// Sent, awaiting their replies in order (from `head`).
    private var inFlight = ReplyQueue()
    /// Waiting for the connection being opened: encoded commands and their continuations (one
    /// per command, in order).
    private var waiting: [(bytes: [UInt8], replies: [Reply])] = []
    /// How many replies `waiting` holds in all.
    private var waitingReplies = 0
    /// Whether the connection is up now.
    var isUp: Bool { link.isUp }
    private var timeoutTimer: EventLoopTimer?
    private var repliesSinceTick = 0

    init(link: RedisLink, onStateChange: (@Sendable (RedisConnectionState) -> Void)?) {
        self.link = link
        self.onStateChange = onStateChange
        link.owner = self
    }

    private var pendingCount: Int { inFlight.count + waitingReplies }

    /// Sends one encoded command.
    func send(_ bytes: [UInt8], _ reply: @escaping Reply) {
        send(bytes, replies: [reply])
    }

    /// Sends encoded commands in one write (nothing of this client's comes between them), with
    /// one reply handler per command, in order; each is called once, in order, also on failure.
    func send(_ bytes: [UInt8], replies: [Reply]) {
        func failAll(_ error: RedisError) {
            for reply in replies { reply(.failure(error)) }
        }
        if link.isClosed {
            return failAll(RedisError(kind: .closed, message: "the Redis client is closed"))
        }
        guard replies.count <= link.configuration.maximumPendingCommands - pendingCount else {
            return failAll(RedisError(
                kind: .limitExceeded,
                message: "\(pendingCount) Redis commands are already waiting (maximumPendingCommands)"))
        }
        if link.isUp {
            write(bytes, replies)
            return
        }
        link.start()
        if link.isConnecting {
            waiting.append((bytes, replies))
            waitingReplies += replies.count
        } else {
            failAll(RedisError(
                kind: .unavailable, message: "not connected to Redis at \(link.url) (reconnecting)", underlying: lastError))
        }
    }

    private var lastError: SwitchboardError?

    private func write(_ bytes: [UInt8], _ replies: [Reply]) {
        guard link.write(bytes) else {
            let error = RedisError(kind: .limitExceeded,
                                   message: "more than \(link.configuration.maximumOutboundBytes) bytes are queued for Redis")
            for reply in replies { reply(.failure(error)) }
            return
        }
        for reply in replies { inFlight.append(reply) }
        armTimeout()
    }

    func linkUp(reconnected: Bool) {
        lastError = nil
        let queued = waiting
        waiting = []
        waitingReplies = 0
        for (bytes, replies) in queued { write(bytes, replies) }
        onStateChange?(.connected(reconnected: reconnected))
    }

    func linkReceived(_ value: RESPValue) {
        guard let reply = inFlight.popFirst() else {
            link.fail(RedisError(kind: .protocolError, message: "Redis sent a reply nobody asked for"))
            return
        }
        repliesSinceTick += 1
        if case .error(let message) = value {
            reply(.failure(RedisError(kind: .server, message: message)))
        } else {
            reply(.success(value))
        }
    }

    func linkDown(_ error: RedisError) {
        lastError = error.underlying
        timeoutTimer?.cancel()
        timeoutTimer = nil
        let sent = inFlight.removeAll()
        for reply in sent {
            reply(.failure(RedisError(
                kind: error.kind == .timedOut ? .timedOut : .connectionLost,
                message: error.message, underlying: error.underlying)))
        }
        let queued = waiting
        waiting = []
        waitingReplies = 0
        for (_, replies) in queued {
            for reply in replies {
                reply(.failure(RedisError(kind: .unavailable, message: error.message, underlying: error.underlying)))
            }
        }
        onStateChange?(.disconnected(error))
    }

    /// One timer while replies are due: a full period without any reply closes the connection.
    private func armTimeout() {
        guard timeoutTimer == nil else { return }
        repliesSinceTick = 0
        let timeout = link.configuration.commandTimeout
        timeoutTimer = link.loop.schedule(after: timeout) { [weak self] in
            guard let self else { return }
            timeoutTimer = nil
            guard !inFlight.isEmpty else { return }
            if repliesSinceTick == 0 {
                link.fail(RedisError(kind: .timedOut, message: "Redis at \(link.url) did not answer within \(timeout)"))
            } else {
                armTimeout()
            }
        }
    }

    func close() {
        link.close()
        timeoutTimer?.cancel()
        timeoutTimer = nil
        let closed = RedisError(kind: .closed, message: "the Redis client was closed")
        for reply in inFlight.removeAll() { reply(.failure(closed)) }
        let queued = waiting
        waiting = []
        waitingReplies = 0
        for (_, replies) in queued {
            for reply in replies { reply(.failure(closed)) }
        }
    }
}

/// A FIFO of continuations: an array read from `head`, compacted when half consumed.
struct ReplyQueue {
    private var items: [RedisClientCore.Reply] = []
    private var head = 0

    var count: Int { items.count - head }
    var isEmpty: Bool { count == 0 }

    mutating func append(_ reply: @escaping RedisClientCore.Reply) { items.append(reply) }

    mutating func popFirst() -> RedisClientCore.Reply? {
        guard head < items.count else { return nil }
        let reply = items[head]
        head += 1
        if head >= 64 && head * 2 >= items.count {
            items.removeFirst(head)
            head = 0
        }
        return reply
    }

    mutating func removeAll() -> ArraySlice<RedisClientCore.Reply> {
        let rest = items[head...]
        items = []
        head = 0
        return rest
    }
}
