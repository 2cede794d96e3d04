import Logging
import Switchboard

/// The shared state of a ``RedisClusterClient``: the slot map, one ``RedisClient`` per node in
/// use, and the map's refresh (one at a time; every caller that needs it waits for the same one).
///
/// Node clients are leased for each command and released after its reply, so that a node that
/// leaves the map (its slots moved away, or it failed and its replica took over) is closed only
/// once its last command is answered: a reply is never cut off by a refresh. A node that is not
/// a master of the map (the target of an `ASK`, or of a `MOVED` the map does not know yet) gets
/// a client that is closed when its last lease ends, so their number stays bounded by the
/// commands in flight.
actor RedisClusterRouter {
    typealias Address = RedisURL.Address

    /// A node's client, lent to one command.
    struct Lease: Sendable {
        let client: RedisClient
        let address: Address
        /// The map's ``RedisClusterRouter/generation`` when it was lent.
        let generation: Int
    }

    private struct Node {
        let client: RedisClient
        var leases = 0
        /// Not a master of the current map: closed when `leases` falls to 0.
        var retired: Bool
    }

    /// The cluster's URL (seeds, credentials, TLS).
    let url: RedisURL
    let configuration: RedisConfiguration
    let group: EventLoopGroup?
    let logger: Logger

    /// The current map (empty until the first refresh).
    private(set) var map = RedisClusterSlotMap()
    /// How many refreshes have succeeded: 0 before the first map.
    private(set) var generation = 0
    private var nodes: [Address: Node] = [:]
    private var refreshing: Task<RedisError?, Never>?
    private var closed = false

    init(url: RedisURL, configuration: RedisConfiguration, group: EventLoopGroup?, logger: Logger) {
        self.url = url
        self.configuration = configuration
        self.group = group
        self.logger = logger
    }

    /// The URL of one node: the cluster's credentials and TLS, database 0.
    nonisolated func nodeURL(_ address: Address) -> RedisURL {
        RedisURL(host: address.host, port: address.port, useTLS: url.useTLS, username: url.username,
                 password: url.password)
    }

    private static func closedError() -> RedisError {
        RedisError(kind: .closed, message: "the Redis Cluster client was closed")
    }

    /// The master of `slot`'s client; nil when the map names no master for it.
    func lease(slot: Int) throws(RedisError) -> Lease? {
        guard !closed else { throw Self.closedError() }
        guard let address = map.master(for: slot) else { return nil }
        return try lease(address)
    }

    /// The client of the node at `address` (a new one if none is open).
    func lease(_ address: Address) throws(RedisError) -> Lease {
        guard !closed else { throw Self.closedError() }
        if var node = nodes[address] {
            node.leases += 1
            nodes[address] = node
            return Lease(client: node.client, address: address, generation: generation)
        }
        let client = try RedisClient(url: nodeURL(address), configuration: configuration, group: group, logger: logger)
        let isMaster = map.masters.contains(address)
        nodes[address] = Node(client: client, leases: 1, retired: !isMaster)
        return Lease(client: client, address: address, generation: generation)
    }

    /// Ends a lease; closes the node's client if it has left the map and this was its last.
    func release(_ lease: Lease) {
        guard var node = nodes[lease.address], node.client === lease.client else { return }
        node.leases -= 1
        if node.retired && node.leases <= 0 {
            nodes[lease.address] = nil
            let client = node.client
            Task { await client.close() }
        } else {
            nodes[lease.address] = node
        }
    }

    /// Makes sure the map is newer than generation `seen`: returns at once if it is, joins the
    /// refresh in progress if there is one, else starts one. Nil when the map is newer after it,
    /// else the reason it could not be refreshed (the old map stays).
    func refresh(after seen: Int) async -> RedisError? {
        guard !closed else { return Self.closedError() }
        if generation > seen { return nil }
        if let refreshing { return await refreshing.value }
        let candidates = candidateOrder()
        let task = Task<RedisError?, Never> {
            let result = await self.fetchMap(from: candidates)
            return self.apply(result)
        }
        refreshing = task
        return await task.value
    }

    /// The nodes to ask for the map, each once: the current masters (those last answering come
    /// first only by chance: all are equal), then their replicas, then the seeds. A failed master
    /// is still named by the map until its replica takes over; asking it fails at once (its
    /// client is reconnecting) and the next one is asked.
    private func candidateOrder() -> [(address: Address, client: RedisClient?)] {
        var seen = Set<Address>()
        var order: [(address: Address, client: RedisClient?)] = []
        let addresses = map.masters + map.ranges.flatMap { $0.replicas.map(\.address) } + (url.cluster?.seeds ?? [])
        for address in addresses where seen.insert(address).inserted {
            order.append((address, nodes[address]?.client))
        }
        return order
    }

    /// Asks `candidates` in turn for `CLUSTER SLOTS`: the first map that serves every slot, else
    /// (all asked) the one serving most slots; an error naming the last failure when none gave a
    /// map with any slot. Clients opened here for nodes without one are closed after.
    private nonisolated func fetchMap(from candidates: [(address: Address, client: RedisClient?)]) async
        -> Result<RedisClusterSlotMap, RedisError> {
        var best: RedisClusterSlotMap?
        var lastFailure: String?
        for (address, existing) in candidates {
            if Task.isCancelled { break }
            let client: RedisClient
            if let existing {
                client = existing
            } else {
                do throws(RedisError) {
                    client = try RedisClient(url: nodeURL(address), configuration: configuration, group: group, logger: logger)
                } catch {
                    lastFailure = "\(address): \(error.message)"
                    continue
                }
            }
            let reply: RESPValue
            do throws(RedisError) {
                reply = try await client.send("CLUSTER", "SLOTS")
            } catch {
                if existing == nil { await client.close() }
                lastFailure = "\(address): \(error.message)"
                continue
            }
            if existing == nil { await client.close() }
            do throws(RedisClusterSlotMapError) {
                let map = try RedisClusterSlotMap(clusterSlotsReply: reply, from: address)
                if map.servesAllSlots { return .success(map) }
                if map.servedSlotCount > (best?.servedSlotCount ?? 0) { best = map }
                lastFailure = "\(address): its map serves \(map.servedSlotCount) of \(RedisClusterSlot.count) slots"
            } catch {
                lastFailure = "\(address): \(error.description)"
            }
        }
        if let best { return .success(best) }
        let asked = candidates.map(\.address.description).joined(separator: ", ")
        return .failure(RedisError(
            kind: .unavailable,
            message: "no node of the Redis Cluster \(url) gave a slot map (asked \(asked))"
                + (lastFailure.map { "; last: \($0)" } ?? "")))
    }

    /// Installs a fetched map (closing the clients of nodes that left it, once unused), or
    /// keeps the old one on failure. Ends the refresh in progress.
    private func apply(_ result: Result<RedisClusterSlotMap, RedisError>) -> RedisError? {
        refreshing = nil
        guard !closed else { return Self.closedError() }
        switch result {
        case .failure(let error):
            logger.warning("Redis Cluster slot map not refreshed", metadata: ["redis": "\(url)", "error": "\(error.message)"])
            return error
        case .success(let newMap):
            let changed = newMap != map
            map = newMap
            generation += 1
            let masters = Set(newMap.masters)
            for (address, var node) in nodes {
                node.retired = !masters.contains(address)
                if node.retired && node.leases <= 0 {
                    nodes[address] = nil
                    let client = node.client
                    Task { await client.close() }
                } else {
                    nodes[address] = node
                }
            }
            if changed {
                logger.info("Redis Cluster slot map refreshed", metadata: [
                    "redis": "\(url)", "masters": "\(newMap.masters.map(\.description).joined(separator: ","))",
                    "servedSlots": "\(newMap.servedSlotCount)",
                ])
            }
            return nil
        }
    }

    /// The clients of the current map's masters, each leased (release every one).
    func leaseMasters() throws(RedisError) -> [Lease] {
        guard !closed else { throw Self.closedError() }
        var leases: [Lease] = []
        for address in map.masters { leases.append(try lease(address)) }
        return leases
    }

    /// Closes every node's client; commands waiting fail with `.closed`. Idempotent.
    func close() async {
        guard !closed else { return }
        closed = true
        refreshing?.cancel()
        refreshing = nil
        let clients = nodes.values.map(\.client)
        nodes = [:]
        for client in clients { await client.close() }
    }
}
