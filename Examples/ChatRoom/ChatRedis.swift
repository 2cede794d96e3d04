import SwitchboardRedis

/// The chat backend's Redis: one server (given directly, or found through its sentinels) or a
/// Redis Cluster. Every command names the key it is about: a cluster sends it to the master of
/// that key's slot, one server ignores it.
enum ChatRedis: Sendable {
    case single(RedisClient)
    case cluster(RedisClusterClient)

    var isCluster: Bool {
        if case .cluster = self { return true }
        return false
    }

    /// Sends `arguments` (the whole command) to the node serving `key`.
    @discardableResult
    func send(key: String, _ arguments: String...) async throws(RedisError) -> RESPValue {
        try await send(key: key, arguments)
    }

    @discardableResult
    func send(key: String, _ arguments: [String]) async throws(RedisError) -> RESPValue {
        switch self {
        case .single(let client): try await client.send(arguments)
        case .cluster(let cluster): try await cluster.send(key: key, arguments)
        }
    }

    /// Binary-safe arguments.
    @discardableResult
    func send(key: String, bytes arguments: [[UInt8]]) async throws(RedisError) -> RESPValue {
        switch self {
        case .single(let client): try await client.send(bytes: arguments)
        case .cluster(let cluster): try await cluster.send(keyBytes: Array(key.utf8), arguments)
        }
    }

    func close() async {
        switch self {
        case .single(let client): await client.close()
        case .cluster(let cluster): await cluster.close()
        }
    }
}

/// What `/healthz` reports about Redis: whether it serves this node (`200`, else `503`),
/// whether it is degraded, and, by mode, the master in use or each shard of the cluster.
struct RedisHealth: Sendable {
    /// One master of the cluster and the slots it serves.
    struct Shard: Sendable {
        var master: String
        var slots: Int
        /// It answered `INFO replication`.
        var serving: Bool
        /// Its replicas online (nil when it did not answer).
        var replicasOnline: Int?
    }

    var serving: Bool
    var degraded: Bool
    /// `standalone`, `sentinel` or `cluster`.
    var mode: String
    /// One server: its address (nil while not connected).
    var master: String?
    /// A cluster: its masters, by address.
    var shards: [Shard]?

    init(serving: Bool, degraded: Bool, mode: String, master: String? = nil, shards: [Shard]? = nil) {
        self.serving = serving
        self.degraded = degraded
        self.mode = mode
        self.master = master
        self.shards = shards
    }

    var status: Int { serving ? 200 : 503 }

    /// `{"redis":{"master":"host:port"|null,"mode":"standalone"|"sentinel"},"status":"ok"|"degraded"}`,
    /// or for a cluster `{"redis":{"mode":"cluster","shards":[{"master":…,"replicas_online":…,
    /// "serving":…,"slots":…},…]},"status":…}` (keys sorted).
    var json: String {
        let status = degraded ? "\"degraded\"" : "\"ok\""
        guard let shards else {
            let master = master.map { "\"\($0)\"" } ?? "null"
            return "{\"redis\":{\"master\":\(master),\"mode\":\"\(mode)\"},\"status\":\(status)}"
        }
        let list = shards.map { shard in
            "{\"master\":\"\(shard.master)\",\"replicas_online\":\(shard.replicasOnline.map(String.init) ?? "null"),"
                + "\"serving\":\(shard.serving),\"slots\":\(shard.slots)}"
        }
        return "{\"redis\":{\"mode\":\"\(mode)\",\"shards\":[\(list.joined(separator: ","))]},\"status\":\(status)}"
    }
}
