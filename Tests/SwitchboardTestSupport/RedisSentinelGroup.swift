import Foundation

/// A Sentinel-managed Redis for one test, as real processes: a master, a replica
/// (`--replicaof` the master) and three sentinels (`redis-server sentinel.conf --sentinel`,
/// quorum 2, `down-after-milliseconds 1000`, `failover-timeout 2000`, hostnames not resolved),
/// each a ``RedisServerProcess`` on an ephemeral port of 127.0.0.1 that dies with the test
/// process. With `tls`, every process listens with TLS only and talks TLS to the others
/// (`tls-replication yes`). The initializer returns once the replica is in sync and every sentinel sees the
/// replica and the two other sentinels (polled, never slept for).
package final class RedisSentinelGroup: Sendable {
    /// The name the sentinels monitor the master under.
    package let masterName: String
    /// The servers: the master at the start, then the replica.
    package let servers: [RedisServerProcess]
    /// The three sentinels.
    package let sentinels: [RedisServerProcess]

    /// How long the group may take to start, or a failover to complete (two cores, ThreadSanitizer).
    package static let timeout: Duration = .seconds(60)

    package init(masterName: String = "switchboard", tls: RedisServerProcess.TLSFiles? = nil) async throws {
        self.masterName = masterName
        let tlsArguments = tls == nil ? [] : ["--tls-replication", "yes"]
        let master = try await RedisServerProcess(tls: tls, arguments: tlsArguments)
        let replica = try await RedisServerProcess(tls: tls, arguments: tlsArguments + ["--replicaof", "127.0.0.1", String(master.port)])
        servers = [master, replica]
        try await Self.poll("the replica to sync with the master", diagnosis: {
            // What a timeout needs to be understood (run M's failure said only that it timed out).
            "replica: \((try? replica.command("INFO", "replication")) ?? "no answer"); "
                + "replica's log: \(replica.log); master's log: \(master.log)"
        }) {
            try replica.command("INFO", "replication").contains("master_link_status:up")
        }
        var sentinels: [RedisServerProcess] = []
        for _ in 0..<3 {
            let folder = try TestTemporaryDirectory.make(prefix: "switchboard-sentinel-conf")
            let file = folder.appendingPathComponent("sentinel.conf")
            let configuration = """
                sentinel resolve-hostnames no
                sentinel monitor \(masterName) 127.0.0.1 \(master.port) 2
                sentinel down-after-milliseconds \(masterName) 1000
                sentinel failover-timeout \(masterName) 2000

                """
            try configuration.write(to: file, atomically: true, encoding: .utf8)
            sentinels.append(try await RedisServerProcess(tls: tls, configurationFile: file.path,
                                                          arguments: tlsArguments + ["--sentinel"]))
        }
        self.sentinels = sentinels
        for sentinel in sentinels {
            try await Self.poll("sentinel \(sentinel.port) to see the replica and two other sentinels") {
                let fields = try Self.fields(sentinel.command("SENTINEL", "master", masterName))
                return fields["num-other-sentinels"] == "2" && fields["num-slaves"] == "1"
            }
        }
    }

    /// `redis-sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/NAME` (with `userinfo@` and
    /// `query` when given).
    package func url(userinfo: String = "", path: String = "", query: String = "") -> String {
        "redis-sentinel://\(userinfo)" + sentinels.map { "127.0.0.1:\($0.port)" }.joined(separator: ",")
            + "/\(masterName)\(path)\(query)"
    }

    /// The master's port according to the first sentinel that answers.
    package func masterPort() throws -> Int {
        var lastError: Error?
        for sentinel in sentinels where sentinel.isRunning {
            do {
                let lines = try sentinel.command("SENTINEL", "get-master-addr-by-name", masterName)
                    .split(separator: "\n")
                if lines.count == 2, let port = Int(lines[1].trimmingCharacters(in: .whitespaces)) { return port }
            } catch {
                lastError = error
            }
        }
        throw RedisServerProcess.Failure("no sentinel named the master: \(lastError.map { "\($0)" } ?? "none running")")
    }

    /// The server listening on `port`.
    package func server(port: Int) -> RedisServerProcess? { servers.first { $0.port == port } }

    /// Waits until every running sentinel names a master other than `oldPort`, and that server
    /// says `ROLE` master; returns it.
    package func waitForFailover(from oldPort: Int) async throws -> RedisServerProcess {
        var promoted: RedisServerProcess?
        try await Self.poll("a failover away from port \(oldPort)") {
            for sentinel in self.sentinels where sentinel.isRunning {
                let lines = try sentinel.command("SENTINEL", "get-master-addr-by-name", self.masterName).split(separator: "\n")
                guard lines.count == 2, let port = Int(lines[1]), port != oldPort else { return false }
                promoted = self.server(port: port)
            }
            guard let promoted, promoted.isRunning else { return false }
            return try promoted.command("ROLE").hasPrefix("master")
        }
        guard let promoted else { throw RedisServerProcess.Failure("no promoted server") }
        return promoted
    }

    /// Stops every sentinel (`SIGSTOP`) for `duration`, then lets them go on: what a starved
    /// machine does to them. Longer than 2 s puts them in TILT mode, where for 30 s they
    /// answer queries but change nothing (they neither fail over nor reconfigure a returning
    /// master as a replica).
    package func stallSentinels(for duration: Duration) async throws {
        let pids = sentinels.compactMap(\.pid)
        for pid in pids { kill(pid, SIGSTOP) }
        try? await Task.sleep(for: duration)
        for pid in pids { kill(pid, SIGCONT) }
    }

    /// Pairs of lines (`name`, `value`, …) as redis-cli prints a flat array.
    package static func fields(_ text: String) -> [String: String] {
        let lines = text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        var result: [String: String] = [:]
        var i = 0
        while i + 1 < lines.count {
            result[lines[i]] = lines[i + 1]
            i += 2
        }
        return result
    }

    /// ``RedisServerProcess/poll(_:timeout:diagnosis:_:)`` with ``timeout``.
    package static func poll(_ what: String, diagnosis: () -> String = { "" },
                             _ condition: () throws -> Bool) async throws {
        try await RedisServerProcess.poll(what, timeout: timeout, diagnosis: diagnosis, condition)
    }
}
