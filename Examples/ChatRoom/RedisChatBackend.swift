import ChatRoomCore
import Foundation
import ExampleSupport
import Logging
import Switchboard
import SwitchboardRedis
import Synchronization

/// Rooms shared by every chat server given the same Redis (and key prefix).
///
/// - Events: through the server's topics, spread by a ``RedisTopicBackplane``.
/// - Messages: a Lua script appends to the room's stream (bounded length) and publishes the
///   `message` event in one atomic step, so ids and delivery follow one order on every node.
///   Ids are `ms * 1000 + seq` of the entry id (Redis's clock), below 2^53, increasing across
///   nodes and across a Redis restart without persistence: across rooms on one Redis (or
///   Sentinel), per room in a Redis Cluster.
/// - A Redis Cluster (``ChatRedis/cluster(_:)``): each room on the shard of its hash tag, which
///   its keys and its channel share (``roomKey(_:_:)``), so every script touches one slot.
/// - Presence: a hash per room (`name` → node, join time, name, re-join key); each node
///   refreshes a heartbeat key with a TTL. A re-join through any node takes a name over only
///   with the key stored there. A node whose heartbeat expired is reaped by one survivor (the one
///   whose `SREM` from the node set succeeds), which emits the `leave` events once.
final class RedisChatBackend: ChatBackend, @unchecked Sendable {
    // Safety: `heartbeat` is set once in `start` and read in `close`; everything else is immutable.
    let server: WebSocketServer
    let directory: RoomDirectory
    let redis: ChatRedis
    let backplane: RedisTopicBackplane
    let prefix: String
    let presenceTTL: Duration
    let logger: Logger
    /// Messages kept per room's stream (exactly; the newest trimmed id is remembered):
    /// `--redis-history`, ``ChatLimits/defaultRedisHistory`` by default.
    let streamLength: Int
    private var heartbeat: Task<Void, Never>?
    /// Set once a heartbeat registered this node.
    private let registered = AtomicFlag()
    private let resyncNeeded = AtomicFlag()
    /// The backend's own connection (messages, presence) is up.
    private let commandsConnected = AtomicFlag()
    /// Per room with local members: the newest message id this process has delivered (seen
    /// from Redis, or in a history it read). After a pub/sub loss, what follows it in the
    /// room's stream is what this process's clients missed.
    private let lastSeen = LastSeenIDs()
    /// A connection of its own for `WAIT` (which blocks its connection), to the same URL: after
    /// a failover it follows the sentinels to the new master like ``redis``. In a cluster, a
    /// client of its own (one connection per master).
    let ackClient: ChatRedis
    /// `--redis-min-replicas-ack`, fixed by ``configureReplicaAcks(_:)`` before serving.
    private let acks = Atomic<Int>(0)
    /// `standalone`, `sentinel` or `cluster` (`/healthz` reports it).
    let mode: String
    /// In a cluster: the masters of the last heartbeat, to notice a failover (whose shard may
    /// have lost this node's newest presence writes: they are written again).
    private let knownMasters = Protected<Set<RedisURL.Address>>([])
    /// Concurrent confirmations share one `WAIT` (see ``ReplicaAckBatcher``).
    private let ackBatcher = ReplicaAckBatcher()

    var node: String { backplane.nodeID }
    /// In a cluster: how long a command waits for its shard (a failover, a slot moving) before
    /// its room answers `unavailable`. Short: a client retries a post with its `client_id`, and
    /// the other shards' rooms are not held up meanwhile.
    static let clusterRetryBudget: Duration = .seconds(2)

    init(server: WebSocketServer, directory: RoomDirectory, url: RedisURL, backplane: RedisTopicBackplane,
         prefix: String, presenceTTL: Duration, historyLength: Int = ChatLimits.defaultRedisHistory,
         logger: Logger) throws {
        self.server = server
        self.streamLength = min(max(historyLength, 1), ChatLimits.maxRedisHistory)
        self.directory = directory
        self.backplane = backplane
        self.prefix = prefix
        self.presenceTTL = presenceTTL
        self.logger = logger
        mode = url.cluster != nil ? "cluster" : url.sentinels != nil ? "sentinel" : "standalone"
        let trigger = ResyncTrigger()
        if url.cluster != nil {
            var configuration = RedisConfiguration()
            configuration.clusterRetryBudget = Self.clusterRetryBudget
            redis = .cluster(try RedisClusterClient(url: url, configuration: configuration, logger: logger))
            ackClient = .cluster(try RedisClusterClient(url: url, configuration: configuration, logger: logger))
            // Each command reports its own shard's failure; /healthz asks every master.
            commandsConnected.set()
        } else {
            ackClient = .single(try RedisClient(url: url, logger: logger))
            let flag = resyncNeeded
            let up = commandsConnected
            redis = .single(try RedisClient(url: url, logger: logger) { state in
                guard case .connected(let reconnected) = state else {
                    up.clear()
                    return
                }
                up.set()
                guard reconnected else { return }
                flag.set()
                // Redis may have come back empty: write this node's users again now.
                Task { await trigger.backend?.beat() }
            })
        }
        trigger.backend = self
        ackBatcher.backend = self
        let seen = lastSeen
        backplane.observeReceived { topic, message in
            guard let room = RoomDirectory.room(ofTopic: topic), case .text(let bytes) = message,
                  let id = MessageEventID.of(bytes) else { return }
            seen.saw(id, in: room)
        }
        backplane.onPossibleGap { topics in
            let rooms = topics.compactMap(RoomDirectory.room(ofTopic:))
            Task { await trigger.backend?.recover(rooms) }
        }
    }

    private func noteSeen(_ room: String, _ messages: [ServerEvent.Message]) {
        lastSeen.saw(messages.last?.id ?? 0, in: room)
    }

    /// After this process's pub/sub connection came back: each local client of `rooms` gets a
    /// `history` of the messages published meanwhile (what follows the newest id this process
    /// had delivered), joined to the live events with no gap or duplicate (``TopicCatchUp``).
    /// Nothing is sent when nothing was published meanwhile.
    func recover(_ rooms: [String]) async {
        for room in rooms {
            let connections = await directory.connections(in: room)
            guard !connections.isEmpty else { continue }
            let topic = RoomDirectory.topic(room)
            var catchUps: [TopicCatchUp] = []
            for c in connections { catchUps.append(await server.subscribeCatchingUp(c, to: topic)) }
            let after = lastSeen.newest(in: room)
            do {
                guard await server.waitUntilReceivingFromOtherProcesses(topic) else {
                    throw ChatBackendFailure(description: "Redis pub/sub is down again")
                }
                let missed = try await messages(room: room, after: after)
                if missed.messages.isEmpty && missed.complete {
                    for catchUp in catchUps { await catchUp.cancel() }
                    continue
                }
                let newest = max(after, missed.messages.last?.id ?? after)
                logger.info("sent what the room's clients may have missed while Redis pub/sub was down",
                            metadata: ["room": "\(room)", "messages": "\(missed.messages.count)",
                                       "complete": "\(missed.complete)"])
                let line = ServerEvent(type: "history", room: room, messages: missed.messages, complete: missed.complete).line
                for catchUp in catchUps {
                    try? await catchUp.finish(sending: .text(Array(line.utf8))) { payload in
                        guard let id = MessageEventID.of(payload) else { return .deliver }
                        return id <= newest ? .skip : .deliverAndStopFiltering
                    }
                }
            } catch {
                // Reported again at the next reconnection; meanwhile nothing is held back.
                logger.warning("could not recover what the room's clients missed", metadata: ["room": "\(room)",
                                                                                            "error": "\(error)"])
                for catchUp in catchUps { await catchUp.cancel() }
            }
        }
    }

    var requiredReplicaAcks: Int { acks.load(ordering: .acquiring) }

    /// Fixes ``requiredReplicaAcks`` at start-up: `requested` when given, else 1 when the master
    /// (in a cluster: every master) reports a replica online (`INFO replication`), else 0. Tries
    /// for up to `patience` while Redis does not answer, then throws (a default cannot be chosen
    /// without the masters).
    func configureReplicaAcks(_ requested: Int?, patience: Duration = .seconds(15)) async throws -> Int {
        if let requested {
            acks.store(requested, ordering: .releasing)
            return requested
        }
        let deadline = ContinuousClock.now + patience
        while true {
            do {
                let n = try await fewestOnlineReplicas() > 0 ? 1 : 0
                acks.store(n, ordering: .releasing)
                return n
            } catch {
                guard ContinuousClock.now < deadline else {
                    throw ChatBackendFailure(description: "cannot ask the Redis master for its replicas (\(error)); "
                                             + "give --redis-min-replicas-ack explicitly")
                }
                try await Task.sleep(for: .milliseconds(200))
            }
        }
    }

    /// The replicas online of the master (in a cluster: of the master that has the fewest).
    /// Throws when a master does not answer.
    private func fewestOnlineReplicas() async throws -> Int {
        switch redis {
        case .single(let client):
            return Self.onlineReplicas(try await client.send("INFO", "replication").string ?? "")
        case .cluster(let cluster):
            var fewest = Int.max
            for (_, result) in try await cluster.send(toAllMasters: ["INFO", "replication"]) {
                fewest = min(fewest, Self.onlineReplicas(try result.get().string ?? ""))
            }
            guard fewest != Int.max else {
                throw ChatBackendFailure(description: "the Redis Cluster names no master")
            }
            return fewest
        }
    }

    /// Replicas whose `INFO replication` line says `state=online`.
    static func onlineReplicas(_ info: String) -> Int {
        info.split(whereSeparator: \.isNewline).filter { $0.hasPrefix("slave") && $0.contains("state=online") }.count
    }

    func waitForReplicas(of message: ServerEvent.Message) async -> Bool {
        guard requiredReplicaAcks > 0 else { return true }
        return await ackBatcher.wait(room: message.room, entry: Self.streamID(messageID: message.id))
    }

    /// One round of ``ReplicaAckBatcher``: `(room, entry id)` of each waiting message → whether
    /// it is confirmed. One script checks which entries the current master has and writes once
    /// (WAIT counts the replicas that acknowledged this connection's last write, so every
    /// earlier write, these messages included, is waited for: after a failover a message may be
    /// lost, and is then unconfirmed), then one `WAIT` covers them all. In a cluster, one script
    /// per room (its keys share a slot) and one `WAIT` per master, the masters at once.
    fileprivate func confirmRound(_ entries: [(room: String, entry: String)]) async -> [Bool] {
        guard case .cluster(let cluster) = ackClient else {
            return await confirmOnOneMaster(entries, acksKey: key("acks"))
        }
        // Rooms grouped by the master serving them now. A `WAIT` counts its own connection's
        // writes only: a room whose master changed meanwhile (a failover, a slot moved) may
        // have had its script run on another master than the one its `WAIT` went to, so it is
        // not confirmed (the sender retries with its client id, and that retry is checked anew).
        try? await cluster.connect()  // the first round: fetch the map before reading it
        let map = await cluster.slotMap
        let slots = entries.map { RedisClusterSlot.slot(of: roomKey($0.room, "acks")) }
        var byMaster: [String: [Int]] = [:]
        for (i, slot) in slots.enumerated() {
            byMaster[map.master(for: slot)?.description ?? "", default: []].append(i)
        }
        return await withTaskGroup(of: [(Int, Bool)].self) { group in
            for indexes in byMaster.values {
                group.addTask {
                    let results = await self.confirmOnOneMaster(indexes.map { entries[$0] }, acksKey: nil)
                    return Array(zip(indexes, results))
                }
            }
            var confirmed = entries.map { _ in false }
            for await results in group {
                for (i, ok) in results { confirmed[i] = ok }
            }
            let now = await cluster.slotMap
            for (i, slot) in slots.enumerated() where confirmed[i] && now.master(for: slot) != map.master(for: slot) {
                logger.warning("a room's Redis Cluster master changed while confirming: unconfirmed",
                               metadata: ["room": "\(entries[i].room)"])
                confirmed[i] = false
            }
            return confirmed
        }
    }

    /// ``confirmRound(_:)`` for messages on one master: one check script per slot's keys
    /// (`acksKey`, or each room's own acknowledgement counter in a cluster), then one `WAIT`.
    private func confirmOnOneMaster(_ entries: [(room: String, entry: String)], acksKey: String?) async -> [Bool] {
        let n = requiredReplicaAcks
        let timeout = ReplicaAck.timeout.components.seconds * 1000
            + ReplicaAck.timeout.components.attoseconds / 1_000_000_000_000_000
        do {
            var present = entries.map { _ in false }
            var groups: [String: [Int]] = [:]
            for (i, entry) in entries.enumerated() { groups[acksKey ?? roomKey(entry.room, "acks"), default: []].append(i) }
            var waitKey: String?
            for (counter, indexes) in groups {
                var request = ["EVAL", Self.ackScript, String(indexes.count + 1)]
                request += indexes.map { historyKey(entries[$0].room) }
                request.append(counter)
                request += indexes.map { entries[$0].entry }
                guard case .array(let flags) = try await ackClient.send(key: counter, request), flags.count == indexes.count else {
                    continue
                }
                for (i, flag) in zip(indexes, flags) { present[i] = flag.int == 1 }
                waitKey = counter
            }
            if present.contains(false) {
                logger.warning("messages not on the current Redis master: unconfirmed",
                               metadata: ["missing": "\(present.filter { !$0 }.count)"])
            }
            guard present.contains(true), let waitKey else { return present }
            let reached = try await ackClient.send(key: waitKey, "WAIT", String(n), String(timeout)).int ?? 0
            return present.map { $0 && reached >= n }
        } catch {
            logger.warning("waiting for the replicas failed", metadata: ["error": "\(error)"])
            return entries.map { _ in false }
        }
    }

    /// `/healthz`: whether Redis serves this node (its connection up, its users written
    /// again), whether it is degraded (pub/sub down, or fewer replicas online than
    /// ``requiredReplicaAcks``: messages fail), and the master in use.
    func health(backplaneConnected: Bool) async -> RedisHealth {
        guard case .single(let client) = redis else {
            return await clusterHealth(backplaneConnected: backplaneConnected)
        }
        let master = await client.serverAddress
        guard isReady, let master else { return RedisHealth(serving: false, degraded: true, mode: mode) }
        var degraded = !backplaneConnected
        let n = requiredReplicaAcks
        if n > 0 {
            if let info = try? await client.send("INFO", "replication").string {
                degraded = degraded || Self.onlineReplicas(info) < n
            } else {
                return RedisHealth(serving: false, degraded: true, mode: mode)
            }
        }
        return RedisHealth(serving: true, degraded: degraded, mode: mode, master: master.description)
    }

    /// `/healthz` in a cluster: each master of the slot map answers `INFO replication` (with
    /// enough replicas online when ``requiredReplicaAcks`` needs them) or not. Serving while any
    /// shard serves (its rooms work; the others' answer `unavailable`), degraded while any does
    /// not. A master that does not answer makes the map be fetched again (its replica may have
    /// taken over), for this check and the next.
    private func clusterHealth(backplaneConnected: Bool) async -> RedisHealth {
        guard case .cluster(let cluster) = redis, isReady else {
            return RedisHealth(serving: false, degraded: true, mode: mode)
        }
        let n = requiredReplicaAcks
        var results = (try? await cluster.send(toAllMasters: ["INFO", "replication"])) ?? [:]
        if results.isEmpty || results.values.contains(where: { (try? $0.get()) == nil }) {
            try? await cluster.refreshSlotMap()
            results = (try? await cluster.send(toAllMasters: ["INFO", "replication"])) ?? [:]
        }
        let map = await cluster.slotMap
        var shards: [RedisHealth.Shard] = []
        for address in map.masters.sorted(by: { $0.description < $1.description }) {
            let info = results[address].flatMap { try? $0.get().string }
            let slots = map.ranges.filter { $0.master.address == address }.reduce(0) { $0 + $1.slots.count }
            shards.append(RedisHealth.Shard(master: address.description, slots: slots,
                                            serving: info != nil, replicasOnline: info.map(Self.onlineReplicas)))
        }
        let serving = shards.contains(where: \.serving)
        let degraded = !backplaneConnected || map.servedSlotCount < RedisClusterSlot.count
            || shards.contains { !$0.serving || ($0.replicasOnline ?? 0) < n }
        return RedisHealth(serving: serving, degraded: degraded, mode: mode, shards: shards)
    }

    /// Whether this backend's own Redis connection is up and, after a reconnection, this node's
    /// users are written again (`/healthz` reports 503 otherwise).
    var isReady: Bool { commandsConnected.isSet && !resyncNeeded.isSet }

    private func key(_ parts: String...) -> String { prefix + "chat:" + parts.joined(separator: ":") }
    /// A key of `room`: `<prefix>chat:room:<room>:<suffix>` on one server; in a cluster
    /// `<prefix>chat:{room:room:<room>}:<suffix>`, the hash tag of the room's channel
    /// (`<prefix>topic:{room:<topic>}`, topic `room:<room>`), so that its scripts touch one slot
    /// and publish to the channel of that slot. (A `}` in the room's name ends the tag early,
    /// in the keys as in the channel: still one slot.)
    func roomKey(_ room: String, _ suffix: String) -> String {
        redis.isCluster ? prefix + "chat:{room:" + RoomDirectory.topic(room) + "}:" + suffix : key("room", room, suffix)
    }
    private func historyKey(_ room: String) -> String { roomKey(room, "history") }
    /// The id of the newest message trimmed from the room's stream (older ones are gone).
    private func trimmedKey(_ room: String) -> String { roomKey(room, "trimmed") }
    /// A retried post's client id in `room`: holds "id ts" of the message it stored, for
    /// ``ChatLimits/clientIDWindow``. The id is hex-encoded (its UTF-8 bytes): whatever the
    /// client sends, the key cannot be another room's key (`…:history`, `…:presence`).
    private func clientKey(_ room: String, _ clientID: String) -> String {
        roomKey(room, "client:" + clientID.utf8.map { String(format: "%02x", $0) }.joined())
    }
    /// Set when a message found no last id (Redis empty: new, or restarted without
    /// persistence): every id at or below it may have been lost. In a cluster, one per room.
    private func resetKey(_ room: String) -> String { redis.isCluster ? roomKey(room, "reset-at") : key("reset-at") }
    /// On one server, one for every room: ids are unique across rooms, as SQLite's row ids
    /// are. In a cluster, one per room (a script touches one slot): ids increase per room and
    /// `(room, id)` is unique.
    private func lastIDKey(_ room: String) -> String { redis.isCluster ? roomKey(room, "last-id") : key("last-id") }
    private func presenceKey(_ room: String) -> String { roomKey(room, "presence") }
    private var nodesKey: String { key("nodes") }
    private func aliveKey(_ node: String) -> String { key("node", node, "alive") }
    /// One server: the node's members, `room \n name` (the reaper's list). A cluster derives
    /// members from the presence entries (each names its node) and keeps ``roomsKey(_:)``.
    private func membersKey(_ node: String) -> String { key("node", node, "members") }
    /// A cluster: the rooms where the node has (or had) members, for the reaper to look through
    /// one room at a time. Written at each join and each heartbeat.
    private func roomsKey(_ node: String) -> String { key("node", node, "rooms") }
    /// The join and leave scripts' keys: the presence hash, and on one server the member set.
    private func presenceKeys(_ room: String) -> [String] {
        redis.isCluster ? ["1", presenceKey(room)] : ["2", presenceKey(room), membersKey(node)]
    }

    /// Starts the heartbeat (and the reaping of dead nodes).
    func start() {
        heartbeat = Task { [self] in
            let interval = presenceTTL / 3
            while !Task.isCancelled {
                await beat()
                try? await Task.sleep(for: interval)
            }
        }
    }

    func close() async {
        heartbeat?.cancel()
        _ = try? await redis.send(key: aliveKey(node), "DEL", aliveKey(node))
        _ = try? await redis.send(key: nodesKey, "SREM", nodesKey, node)
        await redis.close()
        await ackClient.close()
    }

    // MARK: Presence

    func join(room: String, user: String, connection: WebSocketConnection,
              claim: PresenceClaim) async -> Result<JoinedPresence, ChatError> {
        let values: RESPValue
        do {
            if redis.isCluster {
                // The node's room set may be on another shard: a join does not wait for it (the
                // next heartbeat writes it anyway), so a room is not held up by another shard.
                let redis = redis, key = roomsKey(node)
                Task { _ = try? await redis.send(key: key, "SADD", key, room) }
            }
            values = try await redis.send(key: presenceKey(room), ["EVAL", Self.joinScript] + presenceKeys(room)
                                          + [user.lowercased(), node, user, room, claim.newKey, claim.rejoinKey ?? "",
                                             claim.owner ?? ""])
        } catch {
            logger.warning("join failed", metadata: ["error": "\(error)"])
            return .failure(.unavailable)
        }
        guard case .array(let reply) = values, reply.count == 3, let replacedInRedis = reply[0].int,
              let key = reply[1].string, case .array(let entries) = reply[2] else { return .failure(.nameTaken(user, room)) }
        // The key in Redis is the one every node checks: this node stores the same one. (A name
        // also held on this node is taken over here only with the same key: a stale connection
        // of this node, whose key Redis has.)
        switch await directory.join(room: room, user: user, connection: connection,
                                    claim: PresenceClaim(newKey: key, rejoinKey: claim.rejoinKey, owner: claim.owner)) {
        case .failure(let e):
            // Taken on this node although Redis had it free (Redis lost its data before this
            // node wrote its users again): the entry just written is this node's, for the same
            // name, so it stands for the user already here. Nothing to undo.
            return .failure(e)
        case .success(let local):
            // Subscribed here; wait until other nodes' events reach us before reading state.
            if !(await server.waitUntilReceivingFromOtherProcesses(RoomDirectory.topic(room))) {
                logger.warning("joined while Redis pub/sub is down", metadata: ["room": "\(room)"])
            }
            return .success(JoinedPresence(users: Self.presence(entries), replaced: local.replaced || replacedInRedis == 1,
                                           rejoinKey: key))
        }
    }

    /// Names in join order, from the hash's values `node \t time \t name \t key` (names have
    /// no control characters: no tab). The keys stay here: never sent to anyone.
    static func presence(_ entries: [RESPValue]) -> [String] {
        entries.compactMap { value -> (String, String)? in
            guard let text = value.string else { return nil }
            let parts = text.split(separator: "\t", maxSplits: 3, omittingEmptySubsequences: false)
            guard parts.count >= 3 else { return nil }
            return (String(parts[1]), String(parts[2]))
        }
        .sorted { ($0.0.count, $0.0) < ($1.0.count, $1.0) }
        .map(\.1)
    }

    func leave(room: String, user: String, connection: WebSocketConnection) async -> Bool {
        // Taken over by a re-join on this node: the user is still here.
        guard await directory.leave(room: room, user: user, connection: connection) else { return false }
        do {
            let removed = try await redis.send(key: presenceKey(room), ["EVAL", Self.leaveScript] + presenceKeys(room)
                                               + [user.lowercased(), node, room])
            // Taken over by a re-join through another node: the user is still there.
            if removed.int == 0 { return false }
            // A cluster's room set lists where this node has members (the heartbeat adds the
            // rooms back should a join race this).
            if redis.isCluster, await directory.connections(in: room).isEmpty {
                let redis = redis, key = roomsKey(node)
                Task { _ = try? await redis.send(key: key, "SREM", key, room) }
            }
        } catch {
            logger.warning("leave not recorded in Redis", metadata: ["error": "\(error)"])
        }
        return true
    }

    // MARK: History

    func post(room: String, user: String, text: String, clientID: String?) async throws -> ServerEvent.Message {
        try await postReportingRetry(room: room, user: user, text: text, clientID: clientID).message
    }

    func postReportingRetry(room: String, user: String, text: String, clientID: String?) async throws -> PostOutcome {
        // The event line with sentinels where the script puts the id and the timestamp: the
        // same JSON as every other event (sorted keys, same escaping).
        let template = ServerEvent(type: "message", id: Self.idSentinel, ts: Self.tsSentinel, room: room, user: user,
                                   text: text).line
        guard let idRange = template.range(of: "\"id\":\(Self.idSentinel)"),
              let tsRange = template.range(of: "\"ts\":\(Self.tsSentinel)"), idRange.upperBound <= tsRange.lowerBound else {
            throw ChatBackendFailure(description: "cannot build the message event")
        }
        let head = String(template[..<idRange.lowerBound]) + "\"id\":"
        let middle = String(template[idRange.upperBound..<tsRange.lowerBound]) + "\"ts\":"
        let tail = String(template[tsRange.upperBound...])
        let channel = backplane.channel(for: RoomDirectory.topic(room))
        // From no node: every node delivers it, this one too, in Redis's order.
        let header = backplane.envelopeHeader(binary: false, fromThisProcess: false)
        var keys = [historyKey(room), lastIDKey(room), trimmedKey(room), resetKey(room)]
        if let clientID { keys.append(clientKey(room, clientID)) }
        let window = String(ChatLimits.clientIDWindow.components.seconds)
        var request: [[UInt8]] = [Array("EVAL".utf8), Array(Self.postScript.utf8), Array(String(keys.count).utf8)]
        for key in keys { request.append(Array(key.utf8)) }
        let headBytes: [UInt8] = header + Array(head.utf8)
        let arguments: [[UInt8]] = [
            Array(String(streamLength).utf8), Array(user.utf8), Array(text.utf8), Array(channel.utf8),
            headBytes, Array(middle.utf8), Array(tail.utf8), Array(window.utf8),
            Array(String(requiredReplicaAcks).utf8), Array((redis.isCluster ? "SPUBLISH" : "PUBLISH").utf8),
        ]
        request.append(contentsOf: arguments)
        let reply = try await Self.unavailableIfDown { () async throws(RedisError) -> RESPValue in
            try await self.redis.send(key: self.historyKey(room), bytes: request)
        }
        guard case .array(let parts) = reply, parts.count == 2 || parts.count == 4, let id = parts[0].int,
              let ts = parts[1].int else {
            throw ChatBackendFailure(description: "unexpected reply to the post script: \(reply)")
        }
        // Fewer replicas online than the confirmation needs: nothing stored.
        if id < 0 {
            logger.warning("a message refused: fewer Redis replicas online than --redis-min-replicas-ack",
                           metadata: ["online": "\(ts)", "required": "\(requiredReplicaAcks)"])
            throw ChatError.unavailable
        }
        // A retry: the message stored the first time (its user and text as kept in the stream).
        if parts.count == 4, let storedUser = parts[2].string, let storedText = parts[3].string {
            return PostOutcome(message: ServerEvent.Message(id: id, room: room, user: storedUser, text: storedText, ts: ts),
                               isRetry: true)
        }
        return PostOutcome(message: ServerEvent.Message(id: id, room: room, user: user, text: text, ts: ts), isRetry: false)
    }

    func history(room: String, before: Int64?, limit: Int) async throws -> HistoryPage {
        let size = min(max(limit, 1), ChatLimits.maxHistoryPageSize)
        // Exclusive bound below `before`; one more than asked tells whether an older page exists.
        let end = before.map { "(" + Self.streamID(messageID: $0) } ?? "+"
        let reply = try await Self.unavailableIfDown { () async throws(RedisError) -> RESPValue in
            try await self.redis.send(key: self.historyKey(room), "XREVRANGE", self.historyKey(room), end, "-", "COUNT",
                                      String(size + 1))
        }
        let rows = Self.messages(fromNewestFirst: reply, room: room)
        // The newest page (a join's history): this process has delivered up to its last id.
        if before == nil { noteSeen(room, rows) }
        return HistoryPage(rows: rows, limit: size)
    }

    func messages(room: String, after id: Int64) async throws -> (messages: [ServerEvent.Message], complete: Bool) {
        let limit = ChatLimits.resumeHistoryCount
        let replies = try await Self.unavailableIfDown { () async throws(RedisError) -> RESPValue in
            .array([
                try await self.redis.send(key: self.historyKey(room), ["XREVRANGE", self.historyKey(room), "+",
                                                                       "(" + Self.streamID(messageID: id), "COUNT",
                                                                       String(limit + 1)]),
                try await self.redis.send(key: self.trimmedKey(room), "GET", self.trimmedKey(room)),
                try await self.redis.send(key: self.resetKey(room), "GET", self.resetKey(room)),
            ])
        }
        guard case .array(let parts) = replies, parts.count == 3 else {
            throw ChatBackendFailure(description: "unexpected reply to the history commands")
        }
        let rows = Self.messages(fromNewestFirst: parts[0], room: room)
        // Trimmed from the stream, or lost with Redis's data: what is at or below these ids may be gone.
        let trimmed = parts[1].string.flatMap { Self.messageID(streamID: $0) } ?? 0
        let reset = parts[2].string.flatMap { Int64($0) } ?? 0
        let kept = HistoryPage.newestFitting(rows.suffix(limit))
        let complete = kept.count == rows.count && id >= trimmed && (id == 0 || id >= reset)
        noteSeen(room, kept)
        return (kept, complete)
    }

    /// Stream entries (newest first) → messages, oldest first.
    private static func messages(fromNewestFirst reply: RESPValue, room: String) -> [ServerEvent.Message] {
        guard case .array(let entries) = reply else { return [] }
        return entries.compactMap { entry -> ServerEvent.Message? in
            guard case .array(let pair) = entry, pair.count == 2, let sid = pair[0].string,
                  let id = Self.messageID(streamID: sid), case .array(let fields) = pair[1] else { return nil }
            var values: [String: String] = [:]
            var i = 0
            while i + 1 < fields.count {
                if let k = fields[i].string, let v = fields[i + 1].string { values[k] = v }
                i += 2
            }
            guard let user = values["user"], let text = values["text"], let ts = values["ts"].flatMap({ Int64($0) }) else {
                return nil
            }
            return ServerEvent.Message(id: id, room: room, user: user, text: text, ts: ts)
        }
        .reversed()
    }

    /// `ms * 1000 + seq` → `ms-seq` (the inverse of ``messageID(streamID:)``).
    static func streamID(messageID id: Int64) -> String {
        let clamped = max(0, id)
        return "\(clamped / 1000)-\(clamped % 1000)"
    }

    /// Redis unreachable (or lost mid-command) → `unavailable` for the client; other errors as they are.
    private static func unavailableIfDown(_ body: () async throws(RedisError) -> RESPValue) async throws -> RESPValue {
        do {
            return try await body()
        } catch where [.unavailable, .connectionLost, .timedOut, .limitExceeded].contains(error.kind) {
            throw ChatError.unavailable
        }
    }

    /// `ms-seq` → `ms * 1000 + seq` (nil unless seq < 1000 and the result fits).
    static func messageID(streamID: String) -> Int64? {
        let parts = streamID.split(separator: "-")
        guard parts.count == 2, let ms = Int64(parts[0]), let seq = Int64(parts[1]), (0..<1000).contains(seq) else {
            return nil
        }
        let (scaled, overflow) = ms.multipliedReportingOverflow(by: 1000)
        return overflow ? nil : scaled + seq
    }

    // MARK: Heartbeat and reaping

    fileprivate func beat() async {
        let ttl = String(presenceTTL.components.seconds * 1000 + presenceTTL.components.attoseconds / 1_000_000_000_000_000)
        do {
            try await redis.send(key: aliveKey(node), "SET", aliveKey(node), "1", "PX", ttl)
            // Added (1) means this node was not registered: Redis lost its data, or the other
            // nodes reaped this one after missed heartbeats. Either way, write its users again.
            if try await redis.send(key: nodesKey, "SADD", nodesKey, node).int == 1, registered.isSet { resyncNeeded.set() }
            registered.set()
            // A cluster shard failed over: its newest writes (presence) may be lost.
            if await mastersChanged() { resyncNeeded.set() }
            if resyncNeeded.isSet {
                try await resync()
                resyncNeeded.clear()
            }
            // Only rooms with local members need a resume point.
            let localRooms = Set(await directory.members().map(\.room))
            lastSeen.keep(only: localRooms)
            if redis.isCluster, !localRooms.isEmpty {
                try await redis.send(key: roomsKey(node), ["SADD", roomsKey(node)] + localRooms.sorted())
            }
            let nodes = try await redis.send(key: nodesKey, "SMEMBERS", nodesKey).array ?? []
            for other in nodes.compactMap(\.string) where other != node {
                let left: [(room: String, user: String)]
                if redis.isCluster {
                    left = try await reapOneRoomAtATime(other)
                } else {
                    let reaped = try await redis.send(key: nodesKey, ["EVAL", Self.reapScript, "3", nodesKey, aliveKey(other),
                                                                      membersKey(other), other, key("room") + ":", ":presence"])
                    let pairs = reaped.array ?? []
                    left = stride(from: 0, to: pairs.count - 1, by: 2).compactMap { i in
                        guard let room = pairs[i].string, let user = pairs[i + 1].string else { return nil }
                        return (room, user)
                    }
                }
                guard !left.isEmpty else { continue }
                logger.warning("a chat node stopped heartbeating; its users left", metadata: ["node": "\(other)",
                                                                                             "users": "\(left.count)"])
                for (room, user) in left {
                    let event = ServerEvent(type: "leave", id: EventStamp.nextID(), ts: EventStamp.nowMillis(),
                                            room: room, user: user)
                    await server.publish(text: event.line, to: RoomDirectory.topic(room))
                }
            }
        } catch {
            logger.debug("heartbeat failed", metadata: ["error": "\(error)"])
        }
    }

    /// In a cluster: whether the masters differ from the previous heartbeat's (a replica took
    /// over, or a node joined or left). Always false on one server, and at the first call.
    private func mastersChanged() async -> Bool {
        guard case .cluster(let cluster) = redis else { return false }
        let masters = Set(await cluster.slotMap.masters)
        return knownMasters.withLock { known in
            defer { known = masters }
            return !known.isEmpty && known != masters
        }
    }

    /// In a cluster, when `other`'s heartbeat expired and this node is the one that removed it
    /// from the node set: each room it had members in (its room set) loses them, one script per
    /// room. Returns who left. A room whose script fails puts the node back in the set, so the
    /// next heartbeat (of any node) goes on with the rooms left.
    private func reapOneRoomAtATime(_ other: String) async throws -> [(room: String, user: String)] {
        guard try await redis.send(key: aliveKey(other), "EXISTS", aliveKey(other)).int == 0,
              try await redis.send(key: nodesKey, "SREM", nodesKey, other).int == 1 else { return [] }
        let rooms = try await redis.send(key: roomsKey(other), "SMEMBERS", roomsKey(other)).array?.compactMap(\.string) ?? []
        var left: [(room: String, user: String)] = []
        var unfinished = false
        for room in rooms {
            do {
                let names = try await redis.send(key: presenceKey(room), "EVAL", Self.reapRoomScript, "1", presenceKey(room), other)
                left += (names.array ?? []).compactMap(\.string).map { (room, $0) }
                try await redis.send(key: roomsKey(other), "SREM", roomsKey(other), room)
            } catch {
                logger.warning("could not reap a room of a dead chat node; retried at the next heartbeat",
                               metadata: ["node": "\(other)", "room": "\(room)", "error": "\(error)"])
                unfinished = true
            }
        }
        if unfinished {
            _ = try? await redis.send(key: nodesKey, "SADD", nodesKey, other)
        } else {
            try await redis.send(key: roomsKey(other), "DEL", roomsKey(other))
        }
        return left
    }

    /// After Redis came back (possibly empty): this node's members are written again.
    private func resync() async throws {
        for (room, user, rejoinKey, owner) in await directory.members() {
            if redis.isCluster { try await redis.send(key: roomsKey(node), "SADD", roomsKey(node), room) }
            try await redis.send(key: presenceKey(room), ["EVAL", Self.joinScript] + presenceKeys(room)
                                 + [user.lowercased(), node, user, room, rejoinKey, "", owner ?? ""])
        }
    }

    // MARK: Scripts

    private static let idSentinel: Int64 = 8_765_432_109_876_543
    private static let tsSentinel: Int64 = 7_654_321_098_765_432

    /// KEYS: presence hash, this node's member set (not in a cluster). ARGV: key (lower-cased name), node, name,
    /// room, the key of a new presence, the re-join key presented ('' for none), the token
    /// subject ('' without tokens). A name already present is taken over (a re-join after a
    /// reconnect) only when the presented key is the entry's, or when the entry belongs to the
    /// same token subject: the entry keeps its join time (its place in the list) and its key.
    /// The keys are compared through their SHA-1 digests, so the time the comparison takes
    /// tells nothing about the stored key's bytes; the subject is stored as its SHA-1 (hex: no
    /// tab, whatever the `sub`). Returns {replaced (0/1), the entry's key, presence entries},
    /// or nil if the name is taken and not taken over.
    static let joinScript = """
        local cur = redis.call('HGET', KEYS[1], ARGV[1])
        local replaced = 0
        local time
        local key = ARGV[5]
        local owner = ''
        if ARGV[7] and ARGV[7] ~= '' then owner = redis.sha1hex(ARGV[7]) end
        if cur then
          local t, k, o = string.match(cur, '^[^\\t]*\\t([^\\t]*)\\t[^\\t]*\\t([^\\t]*)\\t?([^\\t]*)$')
          local keyMatches = ARGV[6] ~= '' and k and k ~= '' and redis.sha1hex(k) == redis.sha1hex(ARGV[6])
          local ownerMatches = owner ~= '' and o == owner
          if not t or not (keyMatches or ownerMatches) then return false end
          replaced = 1
          time = t
          key = k
        end
        if not time then
          local t = redis.call('TIME')
          time = t[1] .. string.format('%06d', tonumber(t[2]))
        end
        local entry = ARGV[2] .. '\\t' .. time .. '\\t' .. ARGV[3] .. '\\t' .. key
        if owner ~= '' then entry = entry .. '\\t' .. owner end
        redis.call('HSET', KEYS[1], ARGV[1], entry)
        if KEYS[2] then redis.call('SADD', KEYS[2], ARGV[4] .. '\\n' .. ARGV[1]) end
        return {replaced, key, redis.call('HVALS', KEYS[1])}
        """

    /// KEYS: presence hash, this node's member set (not in a cluster). ARGV: key, node, room. Returns 0 when the
    /// entry is another node's (a re-join took the name over there: nobody left), else 1.
    static let leaveScript = """
        local cur = redis.call('HGET', KEYS[1], ARGV[1])
        if KEYS[2] then redis.call('SREM', KEYS[2], ARGV[3] .. '\\n' .. ARGV[1]) end
        if not cur then return 1 end
        if string.sub(cur, 1, #ARGV[2] + 1) ~= ARGV[2] .. '\\t' then return 0 end
        redis.call('HDEL', KEYS[1], ARGV[1])
        return 1
        """

    /// KEYS: history stream, last-id key, the room's trimmed-id key, the reset key, and for a
    /// post with a client id its key. ARGV: max length, user, text, channel, envelope header
    /// plus the JSON before the id, the JSON between id and ts, the JSON after ts, the client
    /// id's lifetime in seconds, the replicas a confirmation needs (0: none), the publishing
    /// command (`PUBLISH`, or in a cluster `SPUBLISH`: the channel shares the keys' slot). In a
    /// cluster every key is the room's (the last id too). Returns {-1, online}
    /// without storing anything when fewer replicas than that are online (`INFO replication`).
    /// Returns {id, ts}; when the client id's key exists (a retry
    /// within its lifetime), nothing is stored or published and it returns {id, ts, user, text}
    /// of the message stored then (user and text from the stream, or the ones given when that
    /// entry was trimmed). The stream is trimmed exactly to its length, remembering the newest
    /// trimmed entry (a `since` at or above it is complete).
    static let postScript = """
        local need = tonumber(ARGV[9] or '0') or 0
        if need > 0 then
          local online = 0
          for _ in string.gmatch(redis.call('INFO', 'replication'), 'state=online') do online = online + 1 end
          if online < need then return {-1, online} end
        end
        if KEYS[5] then
          local prev = redis.call('GET', KEYS[5])
          if prev then
            local pid, pts = string.match(prev, '^(%d+) (%d+)$')
            if pid then
              pid = tonumber(pid)
              pts = tonumber(pts)
              local pms = math.floor(pid / 1000)
              local sid = string.format('%d', pms) .. '-' .. string.format('%d', pid - pms * 1000)
              local user, text = ARGV[2], ARGV[3]
              local entries = redis.call('XRANGE', KEYS[1], sid, sid)
              if entries[1] then
                local f = entries[1][2]
                for i = 1, #f - 1, 2 do
                  if f[i] == 'user' then user = f[i + 1] elseif f[i] == 'text' then text = f[i + 1] end
                end
              end
              return {pid, pts, user, text}
            end
          end
        end
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local lastRaw = redis.call('GET', KEYS[2])
        local last = tonumber(lastRaw or '0')
        local id = now * 1000
        if id <= last then id = last + 1 end
        if not lastRaw then redis.call('SET', KEYS[4], string.format('%d', id - 1)) end
        local ms = math.floor(id / 1000)
        local seq = id - ms * 1000
        local ids = string.format('%d', id)
        local mss = string.format('%d', ms)
        redis.call('XADD', KEYS[1], mss .. '-' .. string.format('%d', seq), 'user', ARGV[2], 'text', ARGV[3], 'ts', mss)
        local over = redis.call('XLEN', KEYS[1]) - tonumber(ARGV[1])
        if over > 0 then
          local old = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', over)
          redis.call('XTRIM', KEYS[1], 'MAXLEN', ARGV[1])
          redis.call('SET', KEYS[3], old[#old][1])
        end
        redis.call('SET', KEYS[2], ids)
        redis.call(ARGV[10], ARGV[4], ARGV[5] .. ids .. ARGV[6] .. mss .. ARGV[7])
        if KEYS[5] then redis.call('SET', KEYS[5], ids .. ' ' .. mss, 'EX', ARGV[8]) end
        return {id, ms}
        """

    /// KEYS: the history stream of each message, then the acknowledgement counter. ARGV: each
    /// message's stream id. Returns 1 per message in its stream, else 0 (this master does not
    /// have it: lost in a failover, or trimmed); when any is there, writes once (INCR) so that a
    /// following `WAIT` on the same connection covers every earlier write.
    static let ackScript = """
        local out = {}
        local any = false
        for i = 1, #ARGV do
          if #redis.call('XRANGE', KEYS[i], ARGV[i], ARGV[i]) == 0 then
            out[i] = 0
          else
            out[i] = 1
            any = true
          end
        end
        if any then redis.call('INCR', KEYS[#KEYS]) end
        return out
        """

    /// KEYS: presence hash of one room. ARGV: a dead node. Removes the node's entries (a
    /// cluster's reaper, one room at a time); returns their names.
    static let reapRoomScript = """
        local out = {}
        local all = redis.call('HGETALL', KEYS[1])
        for i = 1, #all - 1, 2 do
          local v = all[i + 1]
          if string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '\\t' then
            redis.call('HDEL', KEYS[1], all[i])
            table.insert(out, string.match(v, '^[^\\t]*\\t[^\\t]*\\t([^\\t]*)') or all[i])
          end
        end
        return out
        """

    /// KEYS: node set, the node's heartbeat key, its member set. ARGV: node, presence key
    /// prefix and suffix. Returns {room, name, …} of the users removed, empty unless this call
    /// reaped the node (its heartbeat expired and this caller removed it from the set).
    static let reapScript = """
        if redis.call('EXISTS', KEYS[2]) == 1 then return {} end
        if redis.call('SREM', KEYS[1], ARGV[1]) == 0 then return {} end
        local out = {}
        for _, m in ipairs(redis.call('SMEMBERS', KEYS[3])) do
          local nl = string.find(m, '\\n', 1, true)
          if nl then
            local room = string.sub(m, 1, nl - 1)
            local k = string.sub(m, nl + 1)
            local h = ARGV[2] .. room .. ARGV[3]
            local v = redis.call('HGET', h, k)
            if v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '\\t' then
              redis.call('HDEL', h, k)
              local name = string.match(v, '^[^\\t]*\\t[^\\t]*\\t([^\\t]*)')
              table.insert(out, room)
              table.insert(out, name or k)
            end
          end
        end
        redis.call('DEL', KEYS[3])
        return out
        """
}

struct ChatBackendFailure: Error, CustomStringConvertible {
    var description: String
}

/// A flag readable from any task (for example: set by the Redis client's state handler after a
/// reconnect, cleared once the users are written again).
final class AtomicFlag: Sendable {
    private let value = Atomic<Bool>(false)
    var isSet: Bool { value.load(ordering: .acquiring) }
    func set() { value.store(true, ordering: .releasing) }
    func clear() { value.store(false, ordering: .releasing) }
}

/// The newest message id this process delivered, per room with local members.
final class LastSeenIDs: Sendable {
    private let ids = Protected<[String: Int64]>([:])

    func saw(_ id: Int64, in room: String) {
        ids.withLock { if id > $0[room] ?? -1 { $0[room] = id } }
    }

    func newest(in room: String) -> Int64 { ids.withLock { $0[room] } ?? 0 }

    func keep(only rooms: Set<String>) {
        ids.withLock { $0 = $0.filter { rooms.contains($0.key) } }
    }
}

/// The backend, for the Redis client's state handler (set right after the client is made).
private final class ResyncTrigger: Sendable {
    private struct Reference { weak var backend: RedisChatBackend? }
    private let reference = Protected(Reference())

    var backend: RedisChatBackend? {
        get { reference.withLock { $0.backend } }
        set { reference.withLock { $0.backend = newValue } }
    }
}

/// Confirmations of one process, batched: `WAIT` blocks its connection, so waits sent one per
/// message would queue behind each other (a hung replica: 2 s each, one after another). A message
/// arriving while a round runs joins the next one; each round is one check script and one `WAIT`
/// for every message waiting, so no message waits longer than two rounds. At most
/// ``maxRound`` messages per round (one per session at a time, so rarely more).
final class ReplicaAckBatcher: Sendable {
    private struct Waiter {
        var room: String
        var entry: String
        var continuation: CheckedContinuation<Bool, Never>
    }
    private struct State {
        var waiting: [Waiter] = []
        var running = false
        weak var backend: RedisChatBackend?
    }
    private let state = Protected(State())
    static let maxRound = 1000

    /// Set once, right after the backend is made (weak: the backend owns the batcher).
    var backend: RedisChatBackend? {
        get { state.withLock { $0.backend } }
        set { state.withLock { $0.backend = newValue } }
    }

    /// Whether the entry is confirmed by the round that takes it.
    func wait(room: String, entry: String) async -> Bool {
        await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
            let start = state.withLock { s -> Bool in
                s.waiting.append(Waiter(room: room, entry: entry, continuation: c))
                if s.running { return false }
                s.running = true
                return true
            }
            if start { Task { await self.drain() } }
        }
    }

    private func drain() async {
        while true {
            let (round, backend) = state.withLock { s -> ([Waiter], RedisChatBackend?) in
                let round = Array(s.waiting.prefix(Self.maxRound))
                s.waiting.removeFirst(round.count)
                if round.isEmpty { s.running = false }
                return (round, s.backend)
            }
            if round.isEmpty { return }
            let results = await backend?.confirmRound(round.map { ($0.room, $0.entry) })
                ?? round.map { _ in false }
            for (waiter, confirmed) in zip(round, results) { waiter.continuation.resume(returning: confirmed) }
        }
    }
}
