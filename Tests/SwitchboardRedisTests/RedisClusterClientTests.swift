import Foundation
import Switchboard
import SwitchboardCore
@testable import SwitchboardRedis
import SwitchboardTestSupport
import Testing

/// The cluster client without a cluster: arguments refused, seeds that give no map, a scripted
/// node that redirects for ever.
struct RedisClusterClientScriptedTests {
    @Test func aClusterURLWithADatabaseOrAnyOtherURLIsRefused() throws {
        // A database in a Cluster URL is refused by the URL itself…
        #expect(throws: RedisURLError.self) { try RedisURL("redis-cluster://127.0.0.1:7000/1") }
        // …and in a URL built or changed in code, by the client.
        var changed = try RedisURL("redis-cluster://:Zq7-secret@127.0.0.1:7000")
        changed.database = 3
        let refused = [changed, try RedisURL("redis://:Zq7-secret@127.0.0.1:6379"),
                       try RedisURL("rediss-sentinel://:Zq7-secret@127.0.0.1/mymaster"),
                       RedisURL(cluster: .init(seeds: []), password: "Zq7-secret")]
        for url in refused {
            do {
                _ = try RedisClusterClient(url: url)
                Issue.record("accepted \(url)")
            } catch {
                #expect(error.kind == .invalidArgument, "\(error)")
                #expect(!error.description.contains("Zq7"), "\(error)")
            }
        }
        #expect(try RedisClusterClient(url: RedisURL("redis-cluster://127.0.0.1:7000")).url.cluster?.seeds.count == 1)
    }

    /// No seed gives a map (one refuses the connection, one is not a cluster node): `connect()`
    /// and a command fail at once with `.unavailable`, saying why, without the password.
    @Test func withoutASlotMapConnectAndCommandsFailClearly() async throws {
        let standalone = try await RedisServerProcess(password: "Zq7-secret")
        defer { withExtendedLifetime(standalone) {} }
        let client = try RedisClusterClient(
            url: RedisURL("redis-cluster://:Zq7-secret@127.0.0.1:1,127.0.0.1:\(standalone.port)"))
        do {
            try await client.connect()
            Issue.record("connected to a cluster without a cluster node")
        } catch {
            #expect(error.kind == .unavailable, "\(error)")
            #expect(error.message.contains("cluster support disabled"), "\(error)")
            #expect(error.message.contains("127.0.0.1:1") && !error.description.contains("Zq7"), "\(error)")
        }
        await #expect(throws: RedisError.self) { try await client.send(key: "k", "GET", "k") }
        #expect(await client.slotMap == RedisClusterSlotMap())
        await client.close()
        await #expect(throws: RedisError(kind: .closed, message: "the Redis Cluster client was closed")) {
            try await client.send(key: "k", "GET", "k")
        }
    }

    /// A node that answers every command with `MOVED` to itself: the command is sent again
    /// (the map refreshed before each try) up to maximumClusterRedirects times, then fails.
    @Test func aCommandRedirectedForEverFailsAfterTheMaximumOfRedirects() async throws {
        let node = try ScriptedRESPServer()
        let client = try RedisClusterClient(url: RedisURL("redis-cluster://127.0.0.1:\(node.port)"))
        let slot = RedisClusterSlot.slot(of: "k")
        let map = "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:\(node.port)\r\n"
        let command = Task { () -> Result<RESPValue, RedisError> in
            do throws(RedisError) {
                return .success(try await client.send(key: "k", "GET", "k"))
            } catch {
                return .failure(error)
            }
        }
        // The map, asked of the seed on a connection of its own.
        try await node.acceptClient()
        #expect(try await node.readCommand() == ["CLUSTER", "SLOTS"])
        try await node.send(map)
        node.closeClient()
        // The master's connection: 17 tries, each after a refresh of the map but the first.
        try await node.acceptClient()
        var tries = 0
        while tries < 17 {
            let received = try await node.readCommand()
            if received == ["CLUSTER", "SLOTS"] {
                #expect(tries > 0)
                try await node.send(map)
            } else {
                #expect(received == ["GET", "k"])
                tries += 1
                try await node.send("-MOVED \(slot) 127.0.0.1:\(node.port)\r\n")
            }
        }
        guard case .failure(let error) = await command.value else {
            Issue.record("the command succeeded")
            return
        }
        #expect(error.kind == .unavailable && error.message.contains("more than 16 times"), "\(error)")
        #expect(error.message.contains("MOVED \(slot)"), "\(error)")
        await client.close()
    }
}

/// The cluster client against a real Redis Cluster: 3 masters and 3 replicas
/// (``RedisClusterProcesses``), one cluster per test.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct RedisClusterClientTests {
    static func configuration() -> RedisConfiguration {
        var configuration = RedisConfiguration()
        configuration.maximumReconnectDelay = .milliseconds(500)
        return configuration
    }

    /// A key of `slot`'s master for each master of `map` (`prefix` + a number), by master port.
    static func keyPerMaster(_ map: RedisClusterSlotMap, prefix: String) -> [Int: String] {
        var keys: [Int: String] = [:]
        var number = 0
        while keys.count < map.masters.count && number < 100_000 {
            let key = "\(prefix)\(number)"
            if let master = map.master(for: RedisClusterSlot.slot(of: key)), keys[master.port] == nil {
                keys[master.port] = key
            }
            number += 1
        }
        return keys
    }

    /// How many `ASKING` commands the node has run (`INFO commandstats`).
    static func askingCalls(_ node: RedisServerProcess) throws -> Int {
        let stats = RedisClusterProcesses.infoFields(try node.command("INFO", "commandstats"))
        guard let line = stats["cmdstat_asking"] else { return 0 }
        let calls = line.split(separator: ",").first { $0.hasPrefix("calls=") }
        return calls.flatMap { Int($0.dropFirst("calls=".count)) } ?? 0
    }

    @Test func keysOnEveryMasterReadBackWhatWasWritten() async throws {
        let cluster = try await RedisClusterProcesses(password: "Zq7-cluster-pw")
        // One seed is enough: the map names the other nodes.
        let client = try RedisClusterClient(url: RedisURL(cluster.url(seeds: [cluster.nodes[4]])),
                                            configuration: Self.configuration())
        try await client.connect()
        let map = await client.slotMap
        let masterPorts = Set(try cluster.masters().map(\.port))
        #expect(map.servesAllSlots)
        #expect(masterPorts.count == 3 && Set(map.masters.map(\.port)) == masterPorts)

        // 300 keys written at once from concurrent tasks (pipelined on each master's
        // connection), then read back.
        let keys = (0..<300).map { "key:\($0)" }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for key in keys {
                group.addTask { try await client.send(key: key, "SET", key, "value of \(key)") }
            }
            try await group.waitForAll()
        }
        for key in keys {
            #expect(try await client.send(key: key, "GET", key).string == "value of \(key)")
        }
        // The keys landed on all three masters, each on the master the map names for its slot,
        // and Redis computes the same slots.
        var used = Set<Int>()
        for key in keys {
            if let master = map.master(for: RedisClusterSlot.slot(of: key)) { used.insert(master.port) }
        }
        #expect(used == masterPorts)
        for key in keys.prefix(24) {
            let slot = RedisClusterSlot.slot(of: key)
            #expect(try cluster.keySlot(key) == slot)
            let owner = try #require(map.master(for: slot).flatMap { cluster.node(port: $0.port) })
            #expect(try owner.command("GET", key) == "value of \(key)")
        }
        let sizes = try await client.send(toAllMasters: ["DBSIZE"])
        #expect(Set(sizes.keys.map(\.port)) == masterPorts)
        let counts = sizes.values.compactMap { try? $0.get().int }
        #expect(counts.count == 3 && counts.allSatisfy { $0 > 0 } && counts.reduce(0, +) == 300, "\(counts)")

        // Binary-safe keys and values; keys of one hash tag share a slot (a multi-key command).
        let binary: [UInt8] = [0, 13, 10, 255, UInt8(ascii: "{"), UInt8(ascii: "}")]
        try await client.send(keyBytes: Array("{bin}a".utf8), [Array("SET".utf8), Array("{bin}a".utf8), binary])
        try await client.send(key: "{bin}b", "SET", "{bin}b", "b")
        #expect(try await client.send(key: "{bin}a", "MGET", "{bin}a", "{bin}b")
                == .array([.bulkString(binary), .bulkString(Array("b".utf8))]))
        // An error reply is the command's, not the cluster's.
        await #expect(throws: RedisError.self) { try await client.send(key: "{bin}b", "INCR", "{bin}b") }
        #expect(!client.url.description.contains("Zq7") && !"\(map)".contains("Zq7"))
        await client.close()
        await cluster.stop()
    }

    @Test func movedIsFollowedAfterASlotMovesToAnotherMaster() async throws {
        let cluster = try await RedisClusterProcesses()
        let client = try RedisClusterClient(url: RedisURL(cluster.url()), configuration: Self.configuration())
        let key = "moving:{m}"
        try await client.send(key: key, "SET", key, "before")
        let slot = RedisClusterSlot.slot(of: key)
        let source = try #require(await client.slotMap.master(for: slot).flatMap { cluster.node(port: $0.port) })
        let masters = try cluster.masters()
        let destination = try #require(masters.first { $0.port != source.port })
        let sourceID = try cluster.id(of: source)
        let destinationID = try cluster.id(of: destination)

        // The slot moves as `redis-cli --cluster reshard` moves it: IMPORTING on the
        // destination, MIGRATING on the source, MIGRATE its keys, then NODE on every master.
        #expect(try destination.command("CLUSTER", "SETSLOT", "\(slot)", "IMPORTING", sourceID) == "OK")
        #expect(try source.command("CLUSTER", "SETSLOT", "\(slot)", "MIGRATING", destinationID) == "OK")
        #expect(try source.command("MIGRATE", "127.0.0.1", "\(destination.port)", "", "0", "5000", "KEYS", key) == "OK")
        for master in [destination, source] + masters.filter({ $0.port != source.port && $0.port != destination.port }) {
            #expect(try master.command("CLUSTER", "SETSLOT", "\(slot)", "NODE", destinationID) == "OK")
        }

        // The client still maps the slot to the source, which answers MOVED: the map is
        // refreshed and the value read from the destination.
        #expect(await client.slotMap.master(for: slot)?.port == source.port)
        #expect(try await client.send(key: key, "GET", key).string == "before")
        #expect(await client.slotMap.master(for: slot)?.port == destination.port)
        try await client.send(key: key, "SET", key, "after")
        #expect(try destination.command("GET", key) == "after")
        await client.close()
        await cluster.stop()
    }

    @Test func askIsFollowedDuringAMigration() async throws {
        let cluster = try await RedisClusterProcesses()
        let client = try RedisClusterClient(url: RedisURL(cluster.url()), configuration: Self.configuration())
        var impatient = Self.configuration()
        impatient.clusterRetryBudget = .milliseconds(300)
        let shortClient = try RedisClusterClient(url: RedisURL(cluster.url()), configuration: impatient)
        let (moved, stays, created) = ("{ask}:moved", "{ask}:stays", "{ask}:created")
        try await client.send(key: moved, "SET", moved, "m")
        try await client.send(key: stays, "SET", stays, "s")
        let slot = RedisClusterSlot.slot(of: moved)
        let source = try #require(await client.slotMap.master(for: slot).flatMap { cluster.node(port: $0.port) })
        let masters = try cluster.masters()
        let destination = try #require(masters.first { $0.port != source.port })
        let sourceID = try cluster.id(of: source)
        let destinationID = try cluster.id(of: destination)

        // Half-way through a migration: one of the two keys is on the destination already.
        #expect(try destination.command("CLUSTER", "SETSLOT", "\(slot)", "IMPORTING", sourceID) == "OK")
        #expect(try source.command("CLUSTER", "SETSLOT", "\(slot)", "MIGRATING", destinationID) == "OK")
        #expect(try source.command("MIGRATE", "127.0.0.1", "\(destination.port)", "", "0", "5000", "KEYS", moved) == "OK")
        let askingBefore = try Self.askingCalls(destination)

        // The source answers ASK for the key it no longer has (and for a new key): ASKING and
        // the command go to the destination. The key still there is served by the source.
        #expect(try await client.send(key: moved, "GET", moved).string == "m")
        #expect(try await client.send(key: stays, "GET", stays).string == "s")
        try await client.send(key: created, "SET", created, "c")
        #expect(try destination.command("CLUSTER", "COUNTKEYSINSLOT", "\(slot)") == "2")
        #expect(try Self.askingCalls(destination) == askingBefore + 2)
        // ASK does not change the map.
        #expect(await client.slotMap.master(for: slot)?.port == source.port)

        // A command on both keys, split between the nodes, is answered TRYAGAIN: retried until
        // the retry budget is spent, then a clear error.
        do {
            let reply = try await shortClient.send(key: moved, "MGET", moved, stays)
            Issue.record("MGET across a migration answered \(reply)")
        } catch {
            #expect(error.kind == .unavailable && error.message.contains("TRYAGAIN"), "\(error)")
            #expect(error.message.contains("clusterRetryBudget"), "\(error)")
        }

        // The migration ends: every key is read from the destination (through MOVED).
        #expect(try source.command("MIGRATE", "127.0.0.1", "\(destination.port)", "", "0", "5000", "KEYS", stays) == "OK")
        for master in [destination, source] + masters.filter({ $0.port != source.port && $0.port != destination.port }) {
            #expect(try master.command("CLUSTER", "SETSLOT", "\(slot)", "NODE", destinationID) == "OK")
        }
        #expect(try await client.send(key: stays, "MGET", moved, stays, created)
                == .array([.bulkString(Array("m".utf8)), .bulkString(Array("s".utf8)), .bulkString(Array("c".utf8))]))
        #expect(await client.slotMap.master(for: slot)?.port == destination.port)
        await shortClient.close()
        await client.close()
        await cluster.stop()
    }

    @Test func afterAMasterIsKilledItsPromotedReplicaServesItsSlots() async throws {
        let cluster = try await RedisClusterProcesses()
        let client = try RedisClusterClient(url: RedisURL(cluster.url()), configuration: Self.configuration())
        try await client.connect()
        let keys = Self.keyPerMaster(await client.slotMap, prefix: "failover:")
        #expect(keys.count == 3)
        for key in keys.values {
            try await client.send(key: key, "SET", key, "v")
            // Replicated before the kill (WAIT runs on the key's master).
            #expect(try await client.send(key: key, "WAIT", "1", "10000").int == 1)
        }
        let victimPort = try #require(keys.keys.min())
        let victim = try #require(cluster.node(port: victimPort))
        let replica = try #require(try cluster.replica(ofMasterOn: victimPort))
        let key = try #require(keys[victimPort])

        await victim.kill()
        let killed = ContinuousClock.now
        // Commands for the killed master's slots fail (unavailable) until its replica is
        // promoted, then succeed: each command retries for up to clusterRetryBudget (10 s), so
        // one usually outlasts the failover; the loop only guards against a stall.
        var value: String?
        var failures: [RedisError] = []
        while ContinuousClock.now - killed < .seconds(60) {
            do {
                value = try await client.send(key: key, "GET", key).string
                break
            } catch {
                failures.append(error)
                #expect(error.kind == .unavailable || error.kind == .connectionLost, "\(error)")
            }
        }
        let recovery = ContinuousClock.now - killed
        #expect(value == "v", "\(failures)")
        // Node timeout (2 s) plus the election and a few seconds; a generous bound for a loaded
        // machine, not a figure.
        #expect(recovery < .seconds(30), "\(recovery), \(failures)")
        print("RedisClusterClientTests: the killed master's slots were served again after \(recovery) (\(failures.count) failed commands)")
        #expect(await client.slotMap.master(for: RedisClusterSlot.slot(of: key))?.port == replica.port)
        try await client.send(key: key, "SET", key, "written after the failover")
        #expect(try replica.command("GET", key) == "written after the failover")
        for (port, other) in keys where port != victimPort {
            #expect(try await client.send(key: other, "GET", other).string == "v")
        }
        await client.close()
        await cluster.stop()
    }
}
