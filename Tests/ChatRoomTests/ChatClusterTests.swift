import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Switchboard
import SwitchboardCore
import SwitchboardRedis
import SwitchboardTestSupport
import ChatRoomCore
import Testing

/// `chat-room serve --redis redis-cluster://…`: two chat-room processes on a real Redis Cluster
/// (three masters, a replica each: ``RedisClusterProcesses``), rooms chosen to land on every
/// master. A room's keys and channel share its hash tag, so each room lives on one shard: a
/// shard's failover or a slot's move touches its rooms only. Serialized: each test runs eight
/// processes.
@Suite(.serialized, .timeLimit(.minutes(6)))
struct ChatClusterTests {
    /// The slot of `room` (its keys' and channel's hash tag, `{room:room:<room>}`).
    static func slot(ofRoom room: String) -> Int {
        RedisClusterSlot.slot(of: "switchboard:chat:{room:room:\(room)}:history")
    }

    /// One room name per master (`prefix-0`, `prefix-1`, … until each has one), in the masters' order.
    static func roomPerMaster(_ cluster: RedisClusterProcesses, prefix: String) throws -> [(room: String, master: RedisServerProcess)] {
        let masters = try cluster.masters()
        var found: [Int: String] = [:]
        var i = 0
        while found.count < masters.count, i < 10_000 {
            let room = "\(prefix)-\(i)"
            if let master = try cluster.master(ofSlot: slot(ofRoom: room)), let index = masters.firstIndex(where: { $0.port == master.port }),
               found[index] == nil {
                found[index] = room
            }
            i += 1
        }
        return try masters.indices.map { index in
            guard let room = found[index] else { throw TestFailure("no room name lands on master \(masters[index].port)") }
            return (room, masters[index])
        }
    }

    /// The answer to one `message` of `peer`: its own echo (confirmed), or an error. After a
    /// gap in pub/sub (a slot moved, a shard failed over) the echo may come inside the
    /// catch-up `history` that replaces the live events up to it: then that message.
    static func answer(_ peer: TestPeer, user: String, room: String, text: String) async throws -> Event {
        let isEcho: @Sendable (Event) -> Bool = { $0.text == text && $0.user == user }
        let e = try await peer.expect("the answer to \(text)") { e in
            (e.type == "message" && e.room == room && isEcho(e)) || e.type == "error"
                || (e.type == "history" && e.room == room && (e.messages ?? []).contains(where: isEcho))
        }
        if e.type == "history", var echo = (e.messages ?? []).first(where: isEcho) {
            echo.type = "message"
            return echo
        }
        return e
    }

    /// Sends `text` with `clientID` until its sender gets the echo (confirmed), retrying after
    /// `unavailable` and `unconfirmed` with the same client id. The confirmed id, the errors met.
    static func sendUntilConfirmed(_ peer: TestPeer, user: String, room: String, text: String,
                                   clientID: String) async throws -> (id: Int64, errors: [String]) {
        var errors: [String] = []
        let deadline = ContinuousClock.now + RedisClusterProcesses.timeout * 2
        while true {
            try await peer.send(.message(room: room, text: text, clientID: clientID))
            let e = try await answer(peer, user: user, room: room, text: text)
            if e.type == "message" { return (try #require(e.id), errors) }
            let code = e.error?.code ?? "?"
            guard ["unavailable", "unconfirmed"].contains(code) else { throw TestFailure("\(user): unexpected error \(e.raw)") }
            errors.append(code)
            if ContinuousClock.now > deadline { throw TestFailure("\(text) never confirmed: \(errors)") }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    /// A new peer joining `room` on `server` with `since`: the `history` it gets.
    static func rejoinHistory(_ name: String, server: ChatServerProcess, room: String, since: Int64) async throws -> Event {
        let peer = try await TestPeer.connect(name, url: server.wsURL)
        defer { Task { await peer.close() } }
        try await peer.send(.join(room: room, user: name, since: since))
        return try await peer.expect("\(name)'s history of \(room)") { $0.type == "history" && $0.room == room }
    }

    /// `/healthz` of `server`.
    static func health(_ server: ChatServerProcess) async throws -> (status: Int, json: [String: Any]) {
        try await APIClients.get("\(server.httpURL)healthz", key: nil)
    }

    /// The shards of a cluster's `/healthz`: master → serving.
    static func shards(_ json: [String: Any]) -> [String: Bool] {
        let redis = json["redis"] as? [String: Any] ?? [:]
        var shards: [String: Bool] = [:]
        for shard in redis["shards"] as? [[String: Any]] ?? [] {
            if let master = shard["master"] as? String { shards[master] = shard["serving"] as? Bool ?? false }
        }
        return shards
    }

    /// Joins `user` to `room` on `server`.
    static func joined(_ user: String, room: String, on server: ChatServerProcess) async throws -> TestPeer {
        let peer = try await TestPeer.connect(user, url: server.wsURL)
        try await peer.send(.join(room: room, user: user))
        try await peer.expect("\(user)'s history of \(room)") { $0.type == "history" && $0.room == room }
        return peer
    }

    @Test func killingAMasterInterruptsOnlyItsRoomsAndLosesNothingConfirmed() async throws {
        let cluster = try await RedisClusterProcesses()
        defer { withExtendedLifetime(cluster) {} }
        let a = try await ChatServerProcess(redis: cluster.url())
        defer { a.child.signal(SIGKILL) }
        let b = try await ChatServerProcess(redis: cluster.url(seeds: [cluster.nodes[5]]))
        defer { b.child.signal(SIGKILL) }
        for node in [a, b] { try await RedisScaleOutTests.waitUntilHealthy(node) }
        let healthy = try await Self.health(a)
        let masterNames = Set(try cluster.masters().map { "127.0.0.1:\($0.port)" })
        #expect(healthy.status == 200 && healthy.json["status"] as? String == "ok", "\(healthy.json)")
        #expect((healthy.json["redis"] as? [String: Any])?["mode"] as? String == "cluster")
        #expect(Self.shards(healthy.json) == Dictionary(uniqueKeysWithValues: masterNames.map { ($0, true) }), "\(healthy.json)")

        // A room on each master; in each, alice on one process and bob on the other.
        let rooms = try Self.roomPerMaster(cluster, prefix: "kill")
        var pairs: [String: (alice: TestPeer, bob: TestPeer)] = [:]
        for (room, _) in rooms {
            pairs[room] = (try await Self.joined("alice", room: room, on: a), try await Self.joined("bob", room: room, on: b))
        }
        // (room, text) → the id confirmed to its sender.
        let ledger = Ledger()
        let peers = pairs
        @Sendable func send(_ room: String, _ label: String, expectNoError: Bool) async throws {
            guard let pair = peers[room] else { return }
            for (peer, user) in [(pair.alice, "alice"), (pair.bob, "bob")] {
                let text = "\(user) \(label)"
                let r = try await Self.sendUntilConfirmed(peer, user: user, room: room, text: text, clientID: "c-\(room)-\(text)")
                if expectNoError { #expect(r.errors.isEmpty, "\(room) \(text): \(r.errors)") }
                await ledger.note(room, text, r.id)
            }
        }
        for (room, _) in rooms {
            for i in 0..<3 { try await send(room, "before \(i)", expectNoError: true) }
        }
        let sinceBefore = try #require(await ledger.confirmed[rooms[0].room]?["alice before 0"])

        // kill -9 the first room's master mid-conversation. Its replica takes over after the node
        // timeout; the old master is restarted once it has, and becomes the new one's replica
        // (confirmations need one: --redis-min-replicas-ack defaults to 1 here).
        let (victimRoom, victim) = rooms[0]
        let replica = try #require(try cluster.replica(ofMasterOn: victim.port))
        let killedAt = ContinuousClock.now
        await victim.kill()
        let victimSending = Task {
            for i in 0..<4 { try await send(victimRoom, "during \(i)", expectNoError: false) }
            return ContinuousClock.now - killedAt
        }
        // Meanwhile the other rooms go on without an error.
        for i in 0..<4 {
            for (room, _) in rooms.dropFirst() { try await send(room, "during \(i)", expectNoError: true) }
        }
        // While the shard fails over, /healthz answers 200 degraded and names the failed master.
        var during = try await Self.health(a)
        while during.json["status"] as? String != "degraded" {
            try await Task.sleep(for: .milliseconds(50))
            during = try await Self.health(a)
        }
        #expect(during.status == 200, "\(during.json)")
        try await RedisClusterProcesses.poll("the replica to take over") {
            try replica.command("ROLE").hasPrefix("master")
        }
        try await victim.restart()
        try await RedisClusterProcesses.poll("the old master to be the new one's replica") {
            try replica.command("INFO", "replication").contains("state=online")
        }
        let backAfter = try await victimSending.value
        // A figure, not a test (the node timeout, the promotion, the restart and sync; slower on
        // a starved machine): sendUntilConfirmed's deadline is the stall guard.
        print("ChatClusterTests: the killed master's room confirmed its messages again after \(backAfter)")
        for (room, _) in rooms {
            for i in 0..<2 { try await send(room, "after \(i)", expectNoError: false) }
        }

        let confirmed = await ledger.confirmed
        // Rooms on the other masters: every message delivered live to the other process, once,
        // and no `history` after the join (no gap report reached them).
        for (room, _) in rooms.dropFirst() {
            guard let pair = pairs[room] else { continue }
            for (peer, other) in [(pair.alice, "bob"), (pair.bob, "alice")] {
                let events = await peer.events.filter { $0.room == room }
                #expect(events.filter { $0.type == "history" }.count == 1, "\(room): \(events.map(\.description))")
                #expect(!events.contains { $0.type == "error" }, "\(room): \(events.map(\.description))")
                for (text, id) in confirmed[room] ?? [:] where text.hasPrefix(other) {
                    let copies = events.filter { $0.type == "message" && $0.text == text }
                    #expect(copies.count == 1 && copies.first?.id == id, "\(room): \(text) arrived as \(copies.map { $0.id ?? -1 })")
                }
            }
        }

        // Every confirmed message is in its room's history on both processes, once, with its id;
        // a re-join since a message before the kill is complete.
        for (node, name) in [(a, "carol"), (b, "dave")] {
            for (room, _) in rooms {
                let since: Int64 = room == victimRoom ? sinceBefore : 0
                let history = try await Self.rejoinHistory(name, server: node, room: room, since: since)
                #expect(history.complete == true, "\(name) in \(room): \(history.raw)")
                let messages = history.messages ?? []
                for (text, id) in confirmed[room] ?? [:] where id > since {
                    let copies = messages.filter { $0.text == text }
                    #expect(copies.count == 1 && copies.first?.id == id,
                            "\(name) in \(room): \(text) (confirmed as \(id)) is there as \(copies.map { $0.id ?? -1 })")
                }
                let texts = messages.compactMap(\.text)
                #expect(Set(texts).count == texts.count, "\(name) in \(room): no message stored twice")
            }
        }
        let after = try await Self.health(b)
        #expect(after.status == 200 && Self.shards(after.json).values.allSatisfy { $0 } && Self.shards(after.json).count == 3,
                "\(after.json)")
    }

    @Test func reshardingARoomsSlotDuringTrafficLosesAndRepeatsNothing() async throws {
        let cluster = try await RedisClusterProcesses()
        defer { withExtendedLifetime(cluster) {} }
        let a = try await ChatServerProcess(redis: cluster.url())
        defer { a.child.signal(SIGKILL) }
        let b = try await ChatServerProcess(redis: cluster.url())
        defer { b.child.signal(SIGKILL) }
        for node in [a, b] { try await RedisScaleOutTests.waitUntilHealthy(node) }

        // A room among the first 64 slots of its master: `redis-cli --cluster reshard` moves a
        // source's lowest slots first, so moving 64 moves the room.
        let masters = try cluster.masters()
        let source = masters[0]
        let target = masters[1]
        let firstSlot = try Self.lowestSlot(of: source)
        let room = try #require((0..<200_000).lazy.map { "moving-\($0)" }.first {
            (firstSlot..<(firstSlot + 64)).contains(Self.slot(ofRoom: $0))
        })
        let alice = try await Self.joined("alice", room: room, on: a)
        let bob = try await Self.joined("bob", room: room, on: b)

        var confirmed: [String: Int64] = [:]
        // alice posts until five messages after the resharding ended: traffic spans it.
        let reshardDone = Ledger()
        let sending = Task {
            var ids: [String: Int64] = [:]
            var i = 0
            var last: Int?
            while last.map({ i <= $0 + 5 }) ?? true {
                let text = "alice \(i)"
                ids[text] = try await Self.sendUntilConfirmed(alice, user: "alice", room: room, text: text,
                                                              clientID: "r-\(i)").id
                if last == nil, await !reshardDone.confirmed.isEmpty { last = i }
                i += 1
            }
            return ids
        }
        // Once traffic flows, the slot moves.
        _ = try await bob.expect("traffic") { $0.type == "message" && $0.text == "alice 2" }
        _ = try source.cli(["--cluster", "reshard", "127.0.0.1:\(source.port)", "--cluster-from", try cluster.id(of: source),
                            "--cluster-to", try cluster.id(of: target), "--cluster-slots", "64", "--cluster-yes"])
        await reshardDone.note("", "", 0)
        #expect(try cluster.master(ofSlot: Self.slot(ofRoom: room))?.port == target.port, "the room's slot moved")
        for (text, id) in try await sending.value { confirmed[text] = id }
        let sent = confirmed.count
        print("ChatClusterTests: \(sent) messages posted across the resharding")
        for i in 0..<5 {
            let text = "bob after \(i)"
            confirmed[text] = try await Self.sendUntilConfirmed(bob, user: "bob", room: room, text: text, clientID: "b-\(i)").id
        }
        // bob got each of alice's messages once (live or in a catch-up history), in order.
        try await alice.expect("bob's last") { $0.type == "message" && $0.text == "bob after 4" }
        let atBob = await bob.events.filter { $0.room == room }
        let delivered = atBob.filter { $0.type == "message" && $0.user == "alice" }
            + atBob.filter { $0.type == "history" }.flatMap { $0.messages ?? [] }.filter { $0.user == "alice" }
        #expect(sent > 6)
        for i in 0..<sent {
            let copies = delivered.filter { $0.text == "alice \(i)" }
            #expect(copies.count == 1 && copies.first?.id == confirmed["alice \(i)"],
                    "alice \(i) reached bob as \(copies.map { $0.id ?? -1 })")
        }
        for (node, name) in [(a, "carol"), (b, "dave")] {
            let history = try await Self.rejoinHistory(name, server: node, room: room, since: 0)
            #expect(history.complete == true, "\(history.raw)")
            let messages = history.messages ?? []
            for (text, id) in confirmed {
                let copies = messages.filter { $0.text == text }
                #expect(copies.count == 1 && copies.first?.id == id, "\(name): \(text) (\(id)) is there as \(copies.map { $0.id ?? -1 })")
            }
            let ids = messages.compactMap(\.id)
            #expect(ids == ids.sorted() && Set(ids).count == ids.count, "\(name): ids increase: \(ids)")
        }
    }

    /// `cmdstat_spublish` calls of `node` (`INFO commandstats`; scripts' calls included).
    static func spublishCalls(_ node: RedisServerProcess) throws -> Int {
        let info = try node.command("INFO", "commandstats")
        guard let line = info.split(whereSeparator: \.isNewline).first(where: { $0.hasPrefix("cmdstat_spublish:") }),
              let calls = line.split(separator: ",").first?.split(separator: "=").last.flatMap({ Int($0) }) else { return 0 }
        return calls
    }

    /// A message posted to 1,000 rooms through the HTTP API of one process: each master runs
    /// 25–42% of the `SPUBLISH`es (the rooms' hash tags spread over the slots), and each room's
    /// message is in its own history.
    @Test func aThousandRoomsSpreadOverTheMasters() async throws {
        let cluster = try await RedisClusterProcesses()
        defer { withExtendedLifetime(cluster) {} }
        let folder = try ChatPaths.tempDirectory()
        let apiKey = try APIClients.keyFile(in: folder)
        let node = try await ChatServerProcess(redis: cluster.url(), extraArguments: ["--api-key-file", apiKey.path,
                                                                                     "--redis-min-replicas-ack", "0"])
        defer { node.child.signal(SIGKILL) }
        try await RedisScaleOutTests.waitUntilHealthy(node)
        let masters = try cluster.masters()
        let before = try masters.map(Self.spublishCalls)
        let rooms = (0..<1000).map { "spread-\($0)" }
        let key = apiKey.key
        let base = node.httpURL
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            var statuses: [Int] = []
            var next = 0
            func post(_ room: String) async throws -> Int {
                guard let url = URL(string: "\(base)v1/rooms/\(room)/messages") else { throw TestFailure("bad URL") }
                var request = URLRequest(url: url)
                request.httpMethod = "POST"
                request.setValue("Bearer \(key)", forHTTPHeaderField: "Authorization")
                request.setValue("application/json", forHTTPHeaderField: "Content-Type")
                request.httpBody = Data(#"{"user":"spreader","text":"hello"}"#.utf8)
                let (_, response) = try await URLSession.shared.data(for: request)
                return (response as? HTTPURLResponse)?.statusCode ?? 0
            }
            // Eight at a time.
            while next < min(8, rooms.count) {
                let room = rooms[next]
                group.addTask { try await post(room) }
                next += 1
            }
            while let status = try await group.next() {
                statuses.append(status)
                if next < rooms.count {
                    let room = rooms[next]
                    group.addTask { try await post(room) }
                    next += 1
                }
            }
            return statuses
        }
        #expect(statuses.count == 1000 && statuses.allSatisfy { $0 == 200 }, "\(Set(statuses))")
        let shares = try zip(masters.map(Self.spublishCalls), before).map { $0 - $1 }
        let total = shares.reduce(0, +)
        #expect(total == 1000, "SPUBLISH calls \(shares)")
        for (master, calls) in zip(masters, shares) {
            let share = Double(calls) / Double(max(total, 1))
            #expect((0.25...0.42).contains(share), "master \(master.port): \(calls) of \(total)")
        }
        print("ChatClusterTests: SPUBLISH per master for 1,000 rooms: \(shares)")
        for room in ["spread-0", "spread-499", "spread-999"] {
            let page = try await APIClients.get("\(base)v1/rooms/\(room)/messages", key: key)
            let texts = (page.json["messages"] as? [[String: Any]] ?? []).compactMap { $0["text"] as? String }
            #expect(page.status == 200 && texts == ["hello"], "\(room): \(page.json)")
        }
    }

    /// Messages confirmed to their senders: room → text → id.
    actor Ledger {
        private(set) var confirmed: [String: [String: Int64]] = [:]
        func note(_ room: String, _ text: String, _ id: Int64) { confirmed[room, default: [:]][text] = id }
    }

    /// The lowest slot `master` serves (its own `CLUSTER NODES` line).
    static func lowestSlot(of master: RedisServerProcess) throws -> Int {
        let own = try master.command("CLUSTER", "NODES").split(separator: "\n").first { $0.contains("myself") } ?? ""
        let lows = own.split(separator: " ").dropFirst(8).compactMap { $0.split(separator: "-").first.flatMap { Int($0) } }
        return try #require(lows.min())
    }
}
