import Foundation

/// A Redis Cluster for one test, as real processes: three masters and one replica each (six
/// `redis-server --cluster-enabled yes`), made into a cluster with `redis-cli --cluster create
/// … --cluster-replicas 1`. Each node is a ``RedisServerProcess`` on 127.0.0.1 (its own
/// temporary folder, no persistence, dies with the test process) on a port below 32000 whose
/// bus port (port + 10000) was free too.
///
/// Settings: `cluster-node-timeout 2000` (a failed master is detected in 2 s) and
/// `cluster-replica-validity-factor 0` (without it, a replica of a freshly created local cluster
/// may consider its data too old and refuse to be promoted), `cluster-require-full-coverage no`
/// (with the default, every node refuses every command, `CLUSTERDOWN`, from the moment a
/// master is marked failed until its replica is promoted: the other shards would stop too).
/// With `password`, every node
/// requires it (`requirepass`) and replicas use it for their masters (`masterauth`).
///
/// The initializer returns once every node says `cluster_state:ok`, knows all six nodes, and
/// every replica is in sync with its master (polled, never slept for).
package final class RedisClusterProcesses: Sendable {
    /// The six nodes, in creation order (`redis-cli` chose which are masters: see ``masters()``).
    package let nodes: [RedisServerProcess]
    /// The password every node requires, if any.
    package let password: String?

    /// The cluster's node timeout (`cluster-node-timeout`).
    package static let nodeTimeout: Duration = .milliseconds(2000)
    /// How long the cluster may take to form, or a failover to complete, before a wait fails
    /// (two cores, ThreadSanitizer, other tests beside it): a stall guard, not a figure.
    package static let timeout: Duration = .seconds(60)

    package init(password: String? = nil) async throws {
        self.password = password
        let arguments = ["--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
                         "--cluster-replica-validity-factor", "0", "--cluster-require-full-coverage", "no"] + (password.map { ["--masterauth", $0] } ?? [])
        var nodes: [RedisServerProcess] = []
        for _ in 0..<6 {
            nodes.append(try await RedisServerProcess(password: password, arguments: arguments, clusterBus: true))
        }
        self.nodes = nodes
        try nodes[0].cli(["--cluster", "create"] + nodes.map { "127.0.0.1:\($0.port)" }
                         + ["--cluster-replicas", "1", "--cluster-yes"])
        try await waitUntilHealthy(nodes)
        try await Self.poll("every replica to sync with its master", diagnosis: {
            nodes.map { node in
                "node \(node.port): \((try? node.command("INFO", "replication")) ?? "no answer"); log: \(node.log)"
            }.joined(separator: "; ")
        }) {
            var replicas = 0
            for node in nodes {
                let info = try node.command("INFO", "replication")
                if info.contains("role:slave") {
                    guard info.contains("master_link_status:up") else { return false }
                    replicas += 1
                }
            }
            return replicas == 3
        }
    }

    /// `redis-cluster://[:password@]127.0.0.1:P,…` with every node as a seed, or only `seeds`.
    package func url(seeds: [RedisServerProcess]? = nil) -> String {
        let auth = password.map { ":\($0.addingPercentEncoding(withAllowedCharacters: .urlPasswordAllowed) ?? $0)@" } ?? ""
        return "redis-cluster://\(auth)" + (seeds ?? nodes).map { "127.0.0.1:\($0.port)" }.joined(separator: ",")
    }

    /// The node listening on `port`.
    package func node(port: Int) -> RedisServerProcess? { nodes.first { $0.port == port } }

    /// The running nodes whose `ROLE` is master.
    package func masters() throws -> [RedisServerProcess] {
        try nodes.filter { node in
            guard node.isRunning else { return false }
            return try node.command("ROLE").hasPrefix("master")
        }
    }

    /// The running replica of the master on `port` (per the replicas' `INFO replication`).
    package func replica(ofMasterOn port: Int) throws -> RedisServerProcess? {
        try nodes.first { node in
            guard node.isRunning else { return false }
            let info = Self.infoFields(try node.command("INFO", "replication"))
            return info["role"] == "slave" && info["master_port"] == String(port)
        }
    }

    /// The `name:value` lines of an `INFO` reply.
    package static func infoFields(_ text: String) -> [String: String] {
        var fields: [String: String] = [:]
        for line in text.split(whereSeparator: \.isNewline) {
            guard let colon = line.firstIndex(of: ":") else { continue }
            fields[String(line[..<colon])] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return fields
    }

    /// The node's id (`CLUSTER MYID`).
    package func id(of node: RedisServerProcess) throws -> String {
        try node.command("CLUSTER", "MYID")
    }

    /// The hash slot of `key` according to Redis (`CLUSTER KEYSLOT`, asked of a running node).
    package func keySlot(_ key: String) throws -> Int {
        guard let node = nodes.first(where: \.isRunning), let slot = Int(try node.command("CLUSTER", "KEYSLOT", key)) else {
            throw RedisServerProcess.Failure("CLUSTER KEYSLOT \(key): no answer")
        }
        return slot
    }

    /// The running master serving `slot`, per that master's own `CLUSTER NODES` line (`myself`).
    package func master(ofSlot slot: Int) throws -> RedisServerProcess? {
        for node in try masters() {
            let own = try node.command("CLUSTER", "NODES").split(separator: "\n").first { $0.contains("myself") } ?? ""
            for field in own.split(separator: " ").dropFirst(8) {
                let bounds = field.split(separator: "-")
                if let first = bounds.first, let low = Int(first), let high = Int(bounds.last ?? first), low <= slot, slot <= high {
                    return node
                }
            }
        }
        return nil
    }

    /// Waits until every running node says `cluster_state:ok` and sees every other running node
    /// connected without failure flags: after a failover or a resharding.
    package func waitUntilHealthy() async throws {
        try await waitUntilHealthy(nodes.filter(\.isRunning))
    }

    private func waitUntilHealthy(_ running: [RedisServerProcess]) async throws {
        let ports = Set(running.map(\.port))
        try await Self.poll("every node to say cluster_state:ok and see the others") {
            for node in running {
                guard try node.command("CLUSTER", "INFO").contains("cluster_state:ok") else { return false }
                let lines = try node.command("CLUSTER", "NODES").split(separator: "\n")
                var healthy = Set<Int>()
                for line in lines {
                    let fields = line.split(separator: " ")
                    guard fields.count >= 8 else { continue }
                    let address = fields[1].prefix { $0 != "@" }
                    guard let port = address.split(separator: ":").last.flatMap({ Int($0) }) else { continue }
                    let flags = fields[2]
                    if !flags.contains("fail"), fields[7] == "connected" || flags.contains("myself") { healthy.insert(port) }
                }
                guard ports.isSubset(of: healthy) else { return false }
            }
            return true
        }
    }

    /// ``RedisServerProcess/poll(_:timeout:diagnosis:_:)`` with ``timeout``.
    package static func poll(_ what: String, diagnosis: () -> String = { "" },
                             _ condition: () throws -> Bool) async throws {
        try await RedisServerProcess.poll(what, timeout: timeout, diagnosis: diagnosis, condition)
    }

    /// Stops every node (SIGKILL) and waits until each exited.
    package func stop() async {
        for node in nodes { await node.stop() }
    }
}
