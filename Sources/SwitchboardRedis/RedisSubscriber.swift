import Logging
import Switchboard
import Synchronization

/// A Redis pub/sub connection: subscribes to channels and hands every message to a handler.
///
/// It keeps the set of channels it should be subscribed to, and restores it by itself after
/// a reconnect (with exponential backoff). Redis does not keep messages for a disconnected
/// subscriber: the state handler hears `.connected(reconnected: true)` after a reconnect, the
/// moment to assume that messages may have been missed.
///
/// With a Sentinel URL it follows the master as ``RedisClient`` does (asks the sentinels on every
/// connection, checks `ROLE`, moves on `+switch-master`); a move is a reconnect, reported as
/// `.connected(reconnected: true)`.
///
/// The message handler runs on the subscriber's event loop, in the order Redis sent the
/// messages; it must not block.
public final class RedisSubscriber: Sendable {
    /// A message: its channel and its payload (binary-safe).
    public typealias Handler = @Sendable (_ channel: String, _ payload: [UInt8]) -> Void

    let core: RedisSubscriberCore

    /// A subscriber for `url`; it connects at once. A Redis Cluster URL (`redis-cluster://`)
    /// throws `.invalidArgument`: this subscriber talks to one server; ``RedisTopicBackplane``
    /// subscribes to a cluster's topics with sharded pub/sub (`SSUBSCRIBE` on each topic's master).
    public init(url: RedisURL, configuration: RedisConfiguration = RedisConfiguration(),
                group: EventLoopGroup? = nil, logger: Logger = Logger(label: "switchboard.redis"),
                onStateChange: (@Sendable (RedisConnectionState) -> Void)? = nil,
                onMessage: @escaping Handler) throws(RedisError) {
        guard url.cluster == nil else { throw RedisError.clusterNotSupported(url) }
        let loop: EventLoop
        do {
            loop = try (group ?? EventLoopGroup.shared).next()
        } catch {
            throw RedisError(kind: .unavailable, message: "no event loop: \(error)")
        }
        let core = RedisSubscriberCore(link: RedisLink(loop: loop, url: url, configuration: configuration, logger: logger),
                                       onStateChange: onStateChange, onMessage: onMessage)
        self.core = core
        loop.execute { core.link.start() }
    }

    deinit {
        let core = core
        core.link.loop.execute { core.close() }
    }

    /// Adds `channel`; returns true once Redis confirmed the subscription. While the first
    /// connection is being made, it waits for it (false if that attempt fails); when the
    /// connection is down after having been up, it returns false at once. Either way the
    /// subscription is made as soon as the connection is (back) up.
    @discardableResult
    public func subscribe(_ channel: String) async -> Bool {
        let core = core
        return await withCheckedContinuation { c in core.link.loop.execute { core.subscribe(channel, c) } }
    }

    /// Adds `channel` without waiting for Redis's confirmation.
    func add(_ channel: String) {
        let core = core
        core.link.loop.execute { core.subscribe(channel, nil) }
    }

    /// Removes `channel` (no more messages from it once Redis processed it).
    public func unsubscribe(_ channel: String) {
        let core = core
        core.link.loop.execute { core.unsubscribe(channel) }
    }

    /// Whether the connection is up and every channel subscribed to is confirmed by Redis.
    public var isReady: Bool { core.ready.load(ordering: .acquiring) }

    /// Closes the connection for good.
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

/// The loop-confined side of ``RedisSubscriber``, and of each node connection of a
/// ``RedisShardedSubscriber`` (mode `.sharded`).
final class RedisSubscriberCore: RedisLinkOwner, @unchecked Sendable {
    // Safety: every member is touched only on `link.loop`'s thread.
    let link: RedisLink
    private let onStateChange: (@Sendable (RedisConnectionState) -> Void)?
    private let onMessage: RedisSubscriber.Handler

    /// Classic pub/sub (`SUBSCRIBE`, `message`) or sharded pub/sub of a Redis Cluster node
    /// (`SSUBSCRIBE` with one command per slot, `smessage`).
    enum Mode { case classic, sharded }
    let mode: Mode
    /// Sharded mode: a channel confirmed by the node (`ssubscribe`), on the loop.
    var onConfirmed: ((String) -> Void)?
    /// Sharded mode: channels still wanted that the node no longer serves (a `sunsubscribe` we
    /// did not ask for, a `MOVED` reply): they are not re-subscribed here; the owner moves them.
    var onLost: (([String]) -> Void)?
    private var subscribeCommand: String { mode == .classic ? "SUBSCRIBE" : "SSUBSCRIBE" }
    private var unsubscribeCommand: String { mode == .classic ? "UNSUBSCRIBE" : "SUNSUBSCRIBE" }
    /// Channels wanted, and those Redis confirmed on this connection.
    private var wanted: Set<String> = []
    private var confirmed: Set<String> = []
    /// SUBSCRIBE and UNSUBSCRIBE requests per channel sent on this connection and not yet
    /// answered. Redis answers each in order, so a `subscribe` reply confirms the channel only
    /// when it answers the last request: after subscribe → unsubscribe → subscribe within one
    /// round trip, the first reply must not count for the third request.
    private var outstanding: [String: Int] = [:]
    private var waiters: [String: [CheckedContinuation<Bool, Never>]] = [:]

    init(link: RedisLink, mode: Mode = .classic, onStateChange: (@Sendable (RedisConnectionState) -> Void)?,
         onMessage: @escaping RedisSubscriber.Handler) {
        self.link = link
        self.mode = mode
        self.onStateChange = onStateChange
        self.onMessage = onMessage
        link.owner = self
    }

    /// `link.isUp && confirmed == wanted`, readable from any thread.
    let ready = Atomic<Bool>(false)

    private func updateReady() {
        ready.store(link.isUp && confirmed == wanted, ordering: .releasing)
    }

    /// Adds `channel`; `waiter` hears true once Redis confirms it, false if it cannot be now.
    /// While the link's first connection is being made, `waiter` waits for its outcome (the
    /// channel is subscribed as soon as the link is up); while the link is down after having
    /// been up, it hears false at once. Returns false in that case only.
    @discardableResult
    func subscribe(_ channel: String, _ waiter: CheckedContinuation<Bool, Never>?) -> Bool {
        let added = wanted.insert(channel).inserted
        if confirmed.contains(channel) {
            waiter?.resume(returning: true)
            return true
        }
        guard link.isUp || (link.isConnecting && !link.everConnected) else {
            waiter?.resume(returning: false)
            return false
        }
        if let waiter { waiters[channel, default: []].append(waiter) }
        // Not up yet: `linkUp` subscribes every wanted channel.
        if added && link.isUp { send(subscribeCommand, [channel]) }
        updateReady()
        return true
    }

    func unsubscribe(_ channel: String) {
        guard wanted.remove(channel) != nil else { return }
        // Unconfirmed at once: a subscribe before Redis answers this must wait for its own reply.
        confirmed.remove(channel)
        for w in waiters.removeValue(forKey: channel) ?? [] { w.resume(returning: false) }
        if link.isUp { send(unsubscribeCommand, [channel]) }
        updateReady()
    }

    /// Sends `command` for `channels`, each counted as awaiting its reply.
    private func send(_ command: String, _ channels: [String]) {
        for channel in channels { outstanding[channel, default: 0] += 1 }
        var bytes: [UInt8] = []
        // Sharded: every channel of one SSUBSCRIBE must share a slot (else CROSSSLOT).
        let groups: [[String]] = switch mode {
        case .classic: [channels]
        case .sharded: Dictionary(grouping: channels, by: RedisClusterSlot.slot(of:)).sorted { $0.key < $1.key }.map(\.value)
        }
        for group in groups {
            var start = 0
            // At most 1,000 channels per command, to keep each command small.
            while start < group.count {
                let end = min(group.count, start + 1000)
                RESPEncoder.append(command: [Array(command.utf8)] + group[start..<end].map { Array($0.utf8) }, to: &bytes)
                start = end
            }
        }
        if !link.write(bytes) {
            link.fail(RedisError(kind: .limitExceeded, message: "the subscriber's queue to Redis is full"))
        }
    }

    func linkUp(reconnected: Bool) {
        confirmed = []
        outstanding = [:]
        if !wanted.isEmpty { send(subscribeCommand, wanted.sorted()) }
        updateReady()
        onStateChange?(.connected(reconnected: reconnected))
    }

    func linkReceived(_ value: RESPValue) {
        guard case .array(let items) = value, items.count == 3, let kind = items[0].string,
              let channel = items[1].string else {
            if case .error(let message) = value, mode == .sharded, message.hasPrefix("MOVED") {
                // The node no longer serves a slot we asked for: every channel still awaiting
                // its confirmation goes to the owner, which finds the new node.
                let lost = wanted.filter { !confirmed.contains($0) && outstanding[$0] != nil }.sorted()
                for channel in lost {
                    wanted.remove(channel)
                    outstanding[channel] = nil
                    for w in waiters.removeValue(forKey: channel) ?? [] { w.resume(returning: false) }
                }
                updateReady()
                if !lost.isEmpty { onLost?(lost) }
                return
            }
            if case .error(let message) = value {
                // Refused (an ACL, for example): never left unsubscribed in silence. The link
                // starts again with backoff and subscribes again, until Redis accepts.
                link.logger.warning("Redis refused a subscription command; reconnecting",
                                    metadata: ["redis": "\(link.url)", "error": "\(message)"])
                link.fail(RedisError(kind: .server, message: "subscription refused: \(message)"))
            }
            return
        }
        switch kind {
        case "message" where mode == .classic, "smessage" where mode == .sharded:
            guard wanted.contains(channel), case .bulkString(let payload) = items[2] else { return }
            onMessage(channel, payload)
        case "subscribe" where mode == .classic, "ssubscribe" where mode == .sharded:
            // Only the reply to the channel's last request says where Redis stands now.
            guard answered(channel) == 0, wanted.contains(channel) else { return }
            confirmed.insert(channel)
            updateReady()
            for w in waiters.removeValue(forKey: channel) ?? [] { w.resume(returning: true) }
            onConfirmed?(channel)
        case "unsubscribe" where mode == .classic, "sunsubscribe" where mode == .sharded:
            // A later SUBSCRIBE of the same channel (re-subscribed meanwhile) confirms it again.
            let unasked = outstanding[channel] == nil
            _ = answered(channel)
            confirmed.remove(channel)
            if mode == .sharded, unasked, wanted.remove(channel) != nil {
                // Not asked for: Redis 7 tells so when the channel's slot left this node.
                for w in waiters.removeValue(forKey: channel) ?? [] { w.resume(returning: false) }
                updateReady()
                onLost?([channel])
                return
            }
            updateReady()
        default:
            break
        }
    }

    /// One request for `channel` was answered; returns how many are still awaiting a reply.
    private func answered(_ channel: String) -> Int {
        let left = max((outstanding[channel] ?? 0) - 1, 0)
        outstanding[channel] = left == 0 ? nil : left
        return left
    }

    func linkDown(_ error: RedisError) {
        confirmed = []
        outstanding = [:]
        updateReady()
        let pending = waiters
        waiters = [:]
        for (_, list) in pending { for w in list { w.resume(returning: false) } }
        onStateChange?(.disconnected(error))
    }

    func close() {
        link.close()
        confirmed = []
        outstanding = [:]
        updateReady()
        let pending = waiters
        waiters = [:]
        for (_, list) in pending { for w in list { w.resume(returning: false) } }
    }
}
