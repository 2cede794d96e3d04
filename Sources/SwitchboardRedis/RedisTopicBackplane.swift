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
    private let client: RedisClient
    private let subscriber: RedisSubscriber
    private let logger: Logger
    private let shared: Mutex<Shared>
    private let counters = BackplaneCounters()

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
        shared = Mutex(Shared())
        client = try RedisClient(url: url, configuration: configuration, group: group, logger: logger)
        let box = WeakBox()
        subscriber = try RedisSubscriber(url: url, configuration: configuration, group: group, logger: logger,
                                         onStateChange: { box.backplane?.subscriberChanged($0) },
                                         onMessage: { channel, payload in box.backplane?.received(channel, payload) })
        let queue = PublishQueue(maximumCount: self.maximumQueuedPublishes, maximumBytes: self.maximumQueuedBytes)
        self.queue = queue
        box.backplane = self
        let core = client.core
        let counters = counters
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

    private let queue: PublishQueue

    /// Whether both connections are up and every topic with local subscribers is subscribed.
    public var isConnected: Bool { counters.clientUp.load(ordering: .acquiring) && subscriber.isReady }

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

    /// The Redis channel of `topic`: `<prefix>topic:<topic>`.
    public func channel(for topic: String) -> String { prefix + "topic:" + topic }

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
        subscriber.add(channel(for: topic))
    }

    public func topicDeactivated(_ topic: String) {
        shared.withLock { _ = $0.topics.remove(topic) }
        subscriber.unsubscribe(channel(for: topic))
    }

    public func publish(_ message: WebSocketMessage, to topic: String, compress: Bool) {
        let command = Self.publishCommand(channel: channel(for: topic), envelope: envelope(message, compress: compress))
        let core = client.core, queue = queue, counters = counters, logger = logger
        core.link.loop.execute { queue.publish(command, via: core, counters: counters, logger: logger) }
    }

    public func waitUntilReceiving(_ topic: String) async -> Bool {
        await subscriber.subscribe(channel(for: topic))
    }

    public func detach() async {
        shared.withLock { $0.receiver = nil }
        await subscriber.close()
        await client.close()
    }

    /// `PUBLISH channel envelope`, encoded.
    static func publishCommand(channel: String, envelope: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = []
        RESPEncoder.append(command: [Array("PUBLISH".utf8), Array(channel.utf8), envelope], to: &bytes)
        return bytes
    }

    // MARK: Receiving

    fileprivate func received(_ channel: String, _ payload: [UInt8]) {
        let topicPrefix = prefix + "topic:"
        guard channel.hasPrefix(topicPrefix) else { return }
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
        let topic = String(channel.dropFirst(topicPrefix.count))
        observer?(topic, message)
        receiver.deliver(message, to: topic, compress: envelope.compress)
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
    private let reference = Mutex(Reference())

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
