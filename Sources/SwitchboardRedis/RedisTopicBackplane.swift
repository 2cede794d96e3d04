import Logging
import Switchboard
import SwitchboardCore
import Synchronization

/// A ``TopicBackplane`` on Redis pub/sub: a server's topics span every process that uses the
/// same Redis and key prefix.
///
/// ```swift
/// var configuration = WebSocketServerConfiguration(host: "0.0.0.0", port: 8080)
/// configuration.backplane = try RedisTopicBackplane(url: RedisURL("redis://redis.internal:6379"))
/// let server = WebSocketServer(configuration: configuration)
/// ```
///
/// How it works (like Socket.IO's Redis adapter and Phoenix's): each process has a random
/// ``nodeID``; a publish is served to local subscribers in-process and published once to the
/// Redis channel `<prefix>topic:<topic>`, as an envelope carrying the node id; every process
/// subscribed to that channel delivers it to its own subscribers, except the one whose id it
/// carries (it already did). A process subscribes to a topic's channel only while it has local
/// subscribers of that topic. Publishing and subscribing use two connections.
///
/// Redis unreachable: local delivery goes on; publishes for other processes wait in a queue of
/// at most ``maximumQueuedPublishes`` (and ``maximumQueuedBytes``), sent in order once Redis is
/// back, and beyond it are dropped and counted (``Statistics-swift.struct/dropped``). Redis does
/// not keep pub/sub messages for a disconnected subscriber: after reconnecting, the backplane
/// reports a possible gap for every topic it had subscribed
/// (``TopicBackplaneReceiver/reportPossibleGap(in:)``: logged, and counted in
/// ``WebSocketServer/Statistics/backplaneGaps``).
///
/// Redis Cluster (`redis-cluster://` URL, Redis ≥ 7): pub/sub is sharded. A topic's channel is
/// `<prefix>topic:{room:<topic>}` (its hash tag puts it in one slot; the prefix may not contain
/// `{` or `}`); publishes are `SPUBLISH` to the master owning that slot (through a
/// ``RedisClusterClient``), subscriptions `SSUBSCRIBE` on it (one pub/sub connection per master
/// that owns subscribed topics), so a topic's traffic touches only its shard. Publishes to a
/// shard that cannot be reached wait in the same bounded queue (in order per topic), and are
/// sent once a master serves the slot again. Subscriptions follow slot moves and failovers; a
/// possible gap is reported for exactly the topics whose subscription was lost, once they are
/// subscribed again.
public final class RedisTopicBackplane: TopicBackplane {
    /// What the backplane did so far.
    public struct Statistics: Sendable, Equatable {
        /// Messages published to Redis for other processes.
        public var published: Int
        /// Messages from other processes delivered to this server.
        public var received: Int
        /// Publishes dropped: the queue was full while Redis was unreachable, or the connection
        /// was lost after sending (the message may not have reached Redis).
        public var dropped: Int
        /// Envelopes from Redis that were malformed (too short, another version, a reserved flag
        /// bit set, a text payload that is not UTF-8; see ``BackplaneEnvelope``): ignored.
        public var malformed: Int
        /// Times the subscriber reconnected with topics subscribed (a possible gap each).
        public var reconnections: Int
    }

    /// This process's id (32 hexadecimal digits), carried by every message it publishes.
    public let nodeID: String
    /// Prefix of every Redis channel and key (default `switchboard:`).
    public let prefix: String
    /// Publishes kept while Redis is unreachable, at most (default 10,000).
    public let maximumQueuedPublishes: Int
    /// Bytes of publishes kept while Redis is unreachable, at most (default 16 MiB).
    public let maximumQueuedBytes: Int

    private let nodeBytes: [UInt8]
    /// The connections: one Redis (or its Sentinel-found master), or a Redis Cluster.
    private enum Transport {
        case single(RedisClient, RedisSubscriber, PublishQueue)
        case cluster(RedisClusterClient, RedisShardedSubscriber, ClusterPublishQueue)
    }
    private let transport: Transport
    /// Whether the channels are named for a Redis Cluster (with a hash tag).
    private let isCluster: Bool
    private let logger: Logger
    private let shared: Locked<Shared>
    private let counters: BackplaneCounters

    private struct Shared {
        var receiver: TopicBackplaneReceiver?
        var topics: Set<String> = []
        var subscriberWasDown = false
        var gapHandler: (@Sendable ([String]) -> Void)?
        var receiveObserver: (@Sendable (String, WebSocketMessage) -> Void)?
    }

    /// Calls `handler` with the topics whose messages from other processes may have been lost,
    /// each time the subscriber connection is back after a loss (on the subscriber's loop: return
    /// quickly). Also reported to the server (logged, counted). For an application that can
    /// recover what its clients missed, e.g. from a stream it keeps in Redis.
    public func onPossibleGap(_ handler: @escaping @Sendable (_ topics: [String]) -> Void) {
        shared.withLock { $0.gapHandler = handler }
    }

    /// Calls `observer` with every message received from another process, before it is
    /// delivered to the server's subscribers (on the subscriber's loop: return quickly). For
    /// example, to remember the newest id seen per topic.
    public func observeReceived(_ observer: @escaping @Sendable (_ topic: String, _ message: WebSocketMessage) -> Void) {
        shared.withLock { $0.receiveObserver = observer }
    }

    /// Connects to `url` (in the background: the server starts even while Redis is down).
    public init(url: RedisURL, prefix: String = "switchboard:", configuration: RedisConfiguration = RedisConfiguration(),
                maximumQueuedPublishes: Int = 10_000, maximumQueuedBytes: Int = 16 << 20,
                group: EventLoopGroup? = nil, logger: Logger = Logger(label: "switchboard.redis.backplane")) throws(RedisError) {
        let id = BackplaneNode.random()  // never all zeros, which means "from no process"
        nodeBytes = id
        nodeID = BackplaneNode.hex(id)
        self.prefix = prefix
        self.maximumQueuedPublishes = max(0, maximumQueuedPublishes)
        self.maximumQueuedBytes = max(0, maximumQueuedBytes)
        var logger = logger
        logger[metadataKey: "node"] = "\(nodeID)"
        self.logger = logger
        shared = Locked(Shared())
        let counters = BackplaneCounters()
        self.counters = counters
        let box = WeakBox()
        if url.cluster != nil {
            try Self.checkClusterPrefix(prefix)
            isCluster = true
            let cluster = try RedisClusterClient(url: url, configuration: configuration, group: group, logger: logger)
            let subscriber = RedisShardedSubscriber(
                cluster: cluster, group: group, logger: logger,
                onMessage: { channel, payload in box.backplane?.received(channel, payload) },
                onPossibleGap: { channels in box.backplane?.shardGap(channels) })
            let queue = ClusterPublishQueue(cluster: cluster, maximumCount: self.maximumQueuedPublishes,
                                            maximumBytes: self.maximumQueuedBytes, counters: counters, logger: logger)
            transport = .cluster(cluster, subscriber, queue)
            box.backplane = self
            Task { try? await cluster.connect() }
            return
        }
        isCluster = false
        let client = try RedisClient(url: url, configuration: configuration, group: group, logger: logger)
        let subscriber = try RedisSubscriber(url: url, configuration: configuration, group: group, logger: logger,
                                             onStateChange: { box.backplane?.subscriberChanged($0) },
                                             onMessage: { channel, payload in box.backplane?.received(channel, payload) })
        let queue = PublishQueue(maximumCount: self.maximumQueuedPublishes, maximumBytes: self.maximumQueuedBytes)
        transport = .single(client, subscriber, queue)
        box.backplane = self
        let core = client.core
        let publishLogger = logger
        core.link.loop.execute {
            core.onStateChange = { state in
                // On the client's loop: flush what waited for the connection.
                guard case .connected = state else {
                    counters.clientUp.store(false, ordering: .releasing)
                    return
                }
                counters.clientUp.store(true, ordering: .releasing)
                queue.flush(to: core, counters: counters, logger: publishLogger)
            }
            core.link.start()
        }
    }

    /// Refuses a prefix with `{` or `}` for a Redis Cluster: it would change the channels' hash tag.
    static func checkClusterPrefix(_ prefix: String) throws(RedisError) {
        guard !prefix.contains("{"), !prefix.contains("}") else {
            throw RedisError(kind: .invalidArgument,
                             message: "the prefix \"\(prefix)\" contains { or }: with a Redis Cluster it would break the channels' hash tag")
        }
    }

    /// Whether both connections are up and every topic with local subscribers is subscribed.
    /// Redis Cluster: whether every topic with local subscribers is subscribed on its master
    /// (publishes go through the cluster client, which connects to each master on demand).
    public var isConnected: Bool {
        switch transport {
        case .single(_, let subscriber, _): counters.clientUp.load(ordering: .acquiring) && subscriber.isReady
        case .cluster(_, let subscriber, _): subscriber.isReady
        }
    }

    /// Whether the publishing connection is up (for tests: while it is not, publishes queue).
    var isPublishingConnectionUp: Bool { counters.clientUp.load(ordering: .acquiring) }

    /// The counters now.
    public var statistics: Statistics {
        Statistics(published: counters.published.load(ordering: .relaxed),
                   received: counters.received.load(ordering: .relaxed),
                   dropped: counters.dropped.load(ordering: .relaxed),
                   malformed: counters.malformed.load(ordering: .relaxed),
                   reconnections: counters.reconnections.load(ordering: .relaxed))
    }

    /// The Redis channel of `topic`: `<prefix>topic:<topic>`; with a Redis Cluster
    /// `<prefix>topic:{room:<topic>}` (a hash tag: one slot per topic).
    public func channel(for topic: String) -> String {
        isCluster ? prefix + "topic:{room:" + topic + "}" : prefix + "topic:" + topic
    }

    /// The bytes this backplane publishes for `message` (a ``BackplaneEnvelope``): version,
    /// flags, the sender's node id, then the payload. `fromThisProcess: false` marks it as from no
    /// process, so that every process delivers it, this one included: for applications that
    /// publish to ``channel(for:)`` themselves (from a Lua script, atomically with a write) and
    /// want every process to see the messages in Redis's order.
    public func envelope(_ message: WebSocketMessage, compress: Bool = true, fromThisProcess: Bool = true) -> [UInt8] {
        BackplaneEnvelope(message: message, compress: compress,
                          node: fromThisProcess ? nodeBytes : BackplaneEnvelope.noNode).encoded()
    }

    /// The envelope's bytes before the payload (see ``envelope(_:compress:fromThisProcess:)``
    /// and ``BackplaneEnvelope/header(binary:compress:node:)``).
    public func envelopeHeader(binary: Bool, compress: Bool = true, fromThisProcess: Bool = true) -> [UInt8] {
        BackplaneEnvelope.header(binary: binary, compress: compress,
                                 node: fromThisProcess ? nodeBytes : BackplaneEnvelope.noNode)
    }

    // MARK: TopicBackplane

    public func attach(_ receiver: TopicBackplaneReceiver) {
        shared.withLock { $0.receiver = receiver }
    }

    public func topicActivated(_ topic: String) {
        shared.withLock { _ = $0.topics.insert(topic) }
        switch transport {
        case .single(_, let subscriber, _): subscriber.add(channel(for: topic))
        case .cluster(_, let subscriber, _): subscriber.add(channel(for: topic))
        }
    }

    public func topicDeactivated(_ topic: String) {
        shared.withLock { _ = $0.topics.remove(topic) }
        switch transport {
        case .single(_, let subscriber, _): subscriber.unsubscribe(channel(for: topic))
        case .cluster(_, let subscriber, _): subscriber.unsubscribe(channel(for: topic))
        }
    }

    public func publish(_ message: WebSocketMessage, to topic: String, compress: Bool) {
        let channel = channel(for: topic)
        let envelope = envelope(message, compress: compress)
        switch transport {
        case .single(let client, _, let queue):
            let command = Self.publishCommand(channel: channel, envelope: envelope)
            let core = client.core, counters = counters, logger = logger
            core.link.loop.execute { queue.publish(command, via: core, counters: counters, logger: logger) }
        case .cluster(_, _, let queue):
            queue.publish(channel: channel, envelope: envelope)
        }
    }

    public func waitUntilReceiving(_ topic: String) async -> Bool {
        switch transport {
        case .single(_, let subscriber, _): await subscriber.subscribe(channel(for: topic))
        case .cluster(_, let subscriber, _): await subscriber.subscribe(channel(for: topic))
        }
    }

    public func detach() async {
        shared.withLock { $0.receiver = nil }
        switch transport {
        case .single(let client, let subscriber, _):
            await subscriber.close()
            await client.close()
        case .cluster(let cluster, let subscriber, let queue):
            queue.close()
            await subscriber.close()
            await cluster.close()
        }
    }

    /// `PUBLISH channel envelope`, encoded.
    static func publishCommand(channel: String, envelope: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = []
        RESPEncoder.append(command: [Array("PUBLISH".utf8), Array(channel.utf8), envelope], to: &bytes)
        return bytes
    }

    // MARK: Receiving

    /// The topic of `channel`, nil when it is not a topic channel of this backplane.
    private func topic(ofChannel channel: String) -> String? {
        let topicPrefix = prefix + (isCluster ? "topic:{room:" : "topic:")
        guard channel.hasPrefix(topicPrefix) else { return nil }
        let rest = channel.dropFirst(topicPrefix.count)
        guard isCluster else { return String(rest) }
        guard rest.hasSuffix("}") else { return nil }
        return String(rest.dropLast())
    }

    fileprivate func received(_ channel: String, _ payload: [UInt8]) {
        guard let topic = topic(ofChannel: channel) else { return }
        // Our own publish, already served in-process (checked before decoding, which validates).
        let nodeRange = (BackplaneEnvelope.headerLength - BackplaneEnvelope.nodeIDLength)..<BackplaneEnvelope.headerLength
        if payload.count >= BackplaneEnvelope.headerLength, payload[0] == BackplaneEnvelope.version,
           payload[nodeRange].elementsEqual(nodeBytes) { return }
        guard let envelope = BackplaneEnvelope(decoding: payload) else {
            counters.malformed.add(1, ordering: .relaxed)
            return
        }
        let (receiver, observer) = shared.withLock { ($0.receiver, $0.receiveObserver) }
        guard let receiver else { return }
        let message = envelope.message
        counters.received.add(1, ordering: .relaxed)
        observer?(topic, message)
        receiver.deliver(message, to: topic, compress: envelope.compress)
    }

    /// Redis Cluster: `channels` are subscribed again after their subscription was lost (their
    /// master failed, or their slot moved): a possible gap in exactly their topics.
    fileprivate func shardGap(_ channels: [String]) {
        let topics = channels.compactMap(topic(ofChannel:)).sorted()
        let (receiver, handler) = shared.withLock { s in
            (s.receiver, s.gapHandler)
        }
        guard let receiver, !topics.isEmpty else { return }
        counters.reconnections.add(1, ordering: .relaxed)
        receiver.reportPossibleGap(in: topics)
        handler?(topics)
    }

    fileprivate func subscriberChanged(_ state: RedisConnectionState) {
        switch state {
        case .disconnected:
            shared.withLock { $0.subscriberWasDown = true }
        case .connected:
            let (receiver, topics, handler) = shared.withLock { s -> (TopicBackplaneReceiver?, [String], (@Sendable ([String]) -> Void)?) in
                guard s.subscriberWasDown else { return (nil, [], nil) }
                s.subscriberWasDown = false
                return (s.receiver, s.topics.sorted(), s.gapHandler)
            }
            guard let receiver, !topics.isEmpty else { return }
            counters.reconnections.add(1, ordering: .relaxed)
            receiver.reportPossibleGap(in: topics)
            handler?(topics)
        }
    }
}

/// The backplane, held weakly by its subscriber's handlers (set at the end of its init, which
/// the subscriber's loop may not have seen yet: hence the lock).
private final class WeakBox: Sendable {
    private struct Reference { weak var backplane: RedisTopicBackplane? }
    private let reference = Locked(Reference())

    var backplane: RedisTopicBackplane? {
        get { reference.withLock { $0.backplane } }
        set { reference.withLock { $0.backplane = newValue } }
    }
}

/// Publishes waiting for the connection, bounded. Loop-confined (the client's loop).
private final class PublishQueue: @unchecked Sendable {
    // Safety: touched only on the client's loop.
    private let maximumCount: Int
    private let maximumBytes: Int
    private var commands: [[UInt8]] = []
    private var bytes = 0
    /// Whether the drops of this outage were logged already.
    private var loggedDrops = false

    init(maximumCount: Int, maximumBytes: Int) {
        self.maximumCount = maximumCount
        self.maximumBytes = maximumBytes
    }

    func publish(_ command: [UInt8], via core: RedisClientCore, counters: BackplaneCounters, logger: Logger) {
        if core.isUp && commands.isEmpty {
            send(command, via: core, counters: counters)
            return
        }
        core.link.start()
        guard commands.count < maximumCount, bytes + command.count <= maximumBytes else {
            counters.dropped.add(1, ordering: .relaxed)
            if !loggedDrops {
                loggedDrops = true
                logger.warning("Redis unreachable and the publish queue is full: dropping publishes for other processes",
                               metadata: ["queued": "\(commands.count)", "queuedBytes": "\(bytes)"])
            }
            return
        }
        commands.append(command)
        bytes += command.count
    }

    func flush(to core: RedisClientCore, counters: BackplaneCounters, logger: Logger) {
        let waiting = commands
        commands = []
        bytes = 0
        loggedDrops = false
        if !waiting.isEmpty {
            logger.info("sending publishes queued while Redis was unreachable", metadata: ["count": "\(waiting.count)"])
        }
        for command in waiting { send(command, via: core, counters: counters) }
    }

    private func send(_ command: [UInt8], via core: RedisClientCore, counters: BackplaneCounters) {
        core.send(command) { result in
            if case .success = result { counters.published.add(1, ordering: .relaxed) } else { counters.dropped.add(1, ordering: .relaxed) }
        }
    }
}

/// The backplane's counters.
private final class BackplaneCounters: Sendable {
    let published = Atomic<Int>(0)
    let received = Atomic<Int>(0)
    let dropped = Atomic<Int>(0)
    let malformed = Atomic<Int>(0)
    let reconnections = Atomic<Int>(0)
    /// The publishing connection is up.
    let clientUp = Atomic<Bool>(false)
}

/// Redis Cluster publishes: `SPUBLISH` through the cluster client, bounded as ``PublishQueue``
/// (count and bytes, queued and in flight together). One lane per slot, each sent in order, one
/// at a time, so a topic's messages keep their order and a shard that cannot be reached holds up
/// only its own slots; the lanes' rules (admission, eviction, one drainer per lane) are
/// ``ClusterPublishLanes``, kept here behind a lock. A publish that could not be sent
/// (`.unavailable`: no reachable master for the slot) is retried every 200 ms until it is sent or
/// the backplane detaches.
private final class ClusterPublishQueue: Sendable {
    private struct Item {
        let arguments: [[UInt8]]
    }

    private let cluster: RedisClusterClient
    private let counters: BackplaneCounters
    private let logger: Logger
    private let lanes: Locked<ClusterPublishLanes<Item>>

    init(cluster: RedisClusterClient, maximumCount: Int, maximumBytes: Int, counters: BackplaneCounters, logger: Logger) {
        self.cluster = cluster
        self.counters = counters
        self.logger = logger
        lanes = Locked(ClusterPublishLanes(maximumCount: maximumCount, maximumBytes: maximumBytes))
    }

    func publish(channel: String, envelope: [UInt8]) {
        let channelBytes = Array(channel.utf8)
        let slot = RedisClusterSlot.slot(of: channelBytes)
        let item = Item(arguments: [Array("SPUBLISH".utf8), channelBytes, envelope])
        let (admission, evicted, count, bytes) = lanes.withLock { lanes in
            let (admission, evicted) = lanes.admit(item, size: channelBytes.count + envelope.count, slot: slot)
            return (admission, evicted, lanes.count, lanes.bytes)
        }
        if evicted > 0 { counters.dropped.add(evicted, ordering: .relaxed) }
        switch admission {
        case .queued:
            break
        case .startLane:
            Task { await self.drain(slot) }
        case .dropped(let firstDrop):
            counters.dropped.add(1, ordering: .relaxed)
            if firstDrop {
                logger.warning("Redis Cluster shard unreachable and the publish queue is full: dropping publishes for other processes",
                               metadata: ["queued": "\(count)", "queuedBytes": "\(bytes)"])
            }
        }
    }

    /// Sends the lane of `slot` in order until it is given up (``ClusterPublishLanes`` makes this
    /// the lane's only drainer).
    private func drain(_ slot: Int) async {
        var next = lanes.withLock { $0.head(of: slot) }
        while let item = next {
            var sent = false
            while true {
                do throws(RedisError) {
                    _ = try await cluster.send(slot: slot, item.arguments)
                    sent = true
                } catch where error.kind == .unavailable {
                    // Not sent: no reachable master serves the slot yet. Kept, in order.
                    if lanes.withLock({ $0.isClosed }) { break }
                    try? await Task.sleep(for: .milliseconds(200))
                    continue
                } catch {
                    // An error reply, the connection lost after sending, closed: dropped.
                }
                break
            }
            counters.clientUp.store(sent, ordering: .releasing)
            if sent { counters.published.add(1, ordering: .relaxed) } else { counters.dropped.add(1, ordering: .relaxed) }
            next = lanes.withLock { $0.finishHead(of: slot) }
        }
    }

    /// Stops: publishes still queued are dropped.
    func close() {
        lanes.withLock { $0.close() }
    }
}
