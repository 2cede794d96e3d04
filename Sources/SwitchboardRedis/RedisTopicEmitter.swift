import Logging
import Switchboard
import SwitchboardCore

/// Publishes into the topics of every server that shares a Redis through
/// ``RedisTopicBackplane``, from a process that serves no WebSocket (a worker, a cron job, an
/// admin tool), or from a server that wants a message to go through Redis like any other.
///
/// ```swift
/// let emitter = try RedisTopicEmitter(url: RedisURL("redis://redis.internal:6379"))
/// let receivers = try await emitter.publish(text: "deploy finished\n", to: "ops")
/// print("\(receivers) server processes subscribed to it")   // PUBLISH's reply
/// await emitter.close()
/// ```
///
/// It speaks the backplane's envelope (``BackplaneEnvelope``) on the channel
/// `<prefix>topic:<topic>` (``channel(for:)``), with its own random ``nodeID``: every server
/// process with local subscribers of the topic delivers the message to them, once. Use the
/// same `prefix` as the servers' backplanes. A backend in another language can do the same
/// with any Redis client: `docs/redis-envelope.md` describes the bytes, with a Python example.
///
/// A publish waits for Redis's reply, so a publish that returned was accepted by Redis (which
/// does not keep pub/sub messages: a server disconnected from Redis at that moment misses it,
/// and reports a possible gap when it reconnects). Request/response on one pipelined
/// connection of its own (a ``RedisClient``), bounded by that client's limits
/// (``RedisConfiguration/maximumPendingCommands``, ``RedisConfiguration/maximumOutboundBytes``,
/// ``RedisConfiguration/commandTimeout``). While Redis is unreachable a publish fails at once
/// with ``RedisError/Kind-swift.struct/unavailable`` (nothing is queued: the caller decides
/// whether to retry); the connection is re-established in the background. Logs and errors
/// name Redis by its URL with the password redacted.
public final class RedisTopicEmitter: Sendable {
    /// This emitter's node id (32 hexadecimal digits), random, carried by every message it
    /// publishes. It matches no server's, so every server delivers what it publishes.
    public let nodeID: String
    /// Prefix of the channels (default `switchboard:`, as ``RedisTopicBackplane``'s).
    public let prefix: String
    /// Largest envelope published (the receivers' ``RESPParseLimits/maxBulkLength``, from
    /// the configuration's ``RedisConfiguration/parseLimits``; 16 MiB by default): a larger
    /// one would make every receiving backplane drop its Redis connection.
    public let maximumEnvelopeBytes: Int

    private let nodeBytes: [UInt8]
    /// One Redis (or its Sentinel-found master), or a Redis Cluster (sharded pub/sub).
    private enum Client: Sendable {
        case single(RedisClient)
        case cluster(RedisClusterClient)
    }
    private let client: Client

    /// An emitter for the Redis at `url` (not connected yet: the first publish, or
    /// ``connect()``, connects). `prefix` must be the servers' backplane prefix.
    ///
    /// A Redis Cluster URL (`redis-cluster://`) publishes with `SPUBLISH` to the master owning
    /// each topic's channel `<prefix>topic:{room:<topic>}`, as ``RedisTopicBackplane`` does; its
    /// prefix may not contain `{` or `}` (`.invalidArgument`).
    public init(url: RedisURL, prefix: String = "switchboard:", configuration: RedisConfiguration = RedisConfiguration(),
                group: EventLoopGroup? = nil,
                logger: Logger = Logger(label: "switchboard.redis.emitter")) throws(RedisError) {
        let node = BackplaneNode.random()
        nodeBytes = node
        nodeID = BackplaneNode.hex(node)
        self.prefix = prefix
        maximumEnvelopeBytes = max(BackplaneEnvelope.headerLength, configuration.parseLimits.maxBulkLength)
        var logger = logger
        logger[metadataKey: "node"] = "\(nodeID)"
        if url.cluster != nil {
            try RedisTopicBackplane.checkClusterPrefix(prefix)
            client = .cluster(try RedisClusterClient(url: url, configuration: configuration, group: group, logger: logger))
        } else {
            client = .single(try RedisClient(url: url, configuration: configuration, group: group, logger: logger))
        }
    }

    /// The Redis server's URL, or the cluster's (its description hides the password).
    public var url: RedisURL {
        switch client {
        case .single(let client): client.url
        case .cluster(let cluster): cluster.url
        }
    }

    /// The Redis channel of `topic`: `<prefix>topic:<topic>`, the backplane's; with a Redis
    /// Cluster `<prefix>topic:{room:<topic>}`.
    public func channel(for topic: String) -> String {
        if case .cluster = client { return prefix + "topic:{room:" + topic + "}" }
        return prefix + "topic:" + topic
    }

    /// The envelope's bytes before the payload, with this emitter's node id (see
    /// ``BackplaneEnvelope/header(binary:compress:node:)``): for publishing from a Lua script.
    /// The payload that follows is never compressed; `compress` only lets the receiving
    /// servers send the message with permessage-deflate.
    public func envelopeHeader(binary: Bool, compress: Bool = true) -> [UInt8] {
        BackplaneEnvelope.header(binary: binary, compress: compress, node: nodeBytes)
    }

    /// The whole envelope this emitter publishes for `message`.
    public func envelope(_ message: WebSocketMessage, compress: Bool = true) -> [UInt8] {
        BackplaneEnvelope(message: message, compress: compress, node: nodeBytes).encoded()
    }

    /// Opens the connection now and waits until it is ready (or fails).
    /// Redis Cluster: fetches the slot map (each master is connected by its first publish).
    public func connect() async throws(RedisError) {
        switch client {
        case .single(let client): try await client.connect()
        case .cluster(let cluster): try await cluster.connect()
        }
    }

    /// Whether the connection is up now (Redis Cluster: whether a slot map is known).
    public var isConnected: Bool {
        get async {
            switch client {
            case .single(let client): await client.isConnected
            case .cluster(let cluster): await !cluster.slotMap.masters.isEmpty
            }
        }
    }

    /// Publishes `message` to `topic` on every server process that shares the Redis
    /// (`PUBLISH <prefix>topic:<topic> <envelope>`; with a Redis Cluster
    /// `SPUBLISH <prefix>topic:{room:<topic>} <envelope>` to the master owning its slot) and
    /// waits for Redis's reply.
    ///
    /// Returns how many Redis subscribers received it: the number of server processes with
    /// local subscribers of `topic` (0: nobody listens; the message is gone). Throws
    /// ``RedisError``: `.invalidArgument` for a text message that is not valid UTF-8 or an
    /// envelope above ``maximumEnvelopeBytes`` (nothing sent); `.unavailable` while Redis is
    /// unreachable (not sent); `.connectionLost` or `.timedOut` when the connection failed
    /// after sending (it may have been published); `.limitExceeded` when too many commands are
    /// waiting; `.closed` after ``close()``. Cancelling the waiting task does not unsend it;
    /// the task still waits for the reply (bounded by ``RedisConfiguration/commandTimeout``).
    @discardableResult
    public func publish(_ message: WebSocketMessage, to topic: String, compress: Bool = true) async throws(RedisError) -> Int {
        if case .text(let bytes) = message, !UTF8Validator.isValid(bytes) {
            throw RedisError(kind: .invalidArgument, message: "a text message must be valid UTF-8 (topic \(topic))")
        }
        let envelope = envelope(message, compress: compress)
        guard envelope.count <= maximumEnvelopeBytes else {
            throw RedisError(kind: .invalidArgument,
                             message: "an envelope of \(envelope.count) bytes is above the receivers' limit of \(maximumEnvelopeBytes)")
        }
        let channel = Array(channel(for: topic).utf8)
        let reply: RESPValue
        switch client {
        case .single(let client):
            reply = try await client.send(bytes: [Array("PUBLISH".utf8), channel, envelope])
        case .cluster(let cluster):
            // The cluster client retries while the slot's master cannot be reached, within
            // RedisConfiguration.clusterRetryBudget; then `.unavailable`.
            reply = try await cluster.send(keyBytes: channel, [Array("SPUBLISH".utf8), channel, envelope])
        }
        guard case .integer(let receivers) = reply, let count = Int(exactly: receivers), count >= 0 else {
            throw RedisError(kind: .protocolError, message: "Redis did not answer PUBLISH with a subscriber count")
        }
        return count
    }

    /// Publishes a text message (see ``publish(_:to:compress:)``).
    @discardableResult
    public func publish(text: String, to topic: String, compress: Bool = true) async throws(RedisError) -> Int {
        try await publish(.text(Array(text.utf8)), to: topic, compress: compress)
    }

    /// Closes the connection; publishes still waiting fail with `.closed`, and later ones too.
    public func close() async {
        switch client {
        case .single(let client): await client.close()
        case .cluster(let cluster): await cluster.close()
        }
    }
}
