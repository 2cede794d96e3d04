import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Switchboard
import SwitchboardCore
import SwitchboardTestSupport
import ChatRoomCore
import Testing

/// `chat-room serve --redis redis-sentinel://…` against real processes (a master, a replica,
/// three sentinels: ``RedisSentinelGroup``): a confirmed message survives a `kill -9` of its
/// master; without a replica, nothing is confirmed. Serialized: each test runs seven processes.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct ChatSentinelTests {
    /// `/healthz`: its status and body.
    static func health(_ server: ChatServerProcess) async throws -> (status: Int, json: [String: Any]) {
        try await APIClients.get("\(server.httpURL)healthz", key: nil)
    }

    /// The `redis` object of a `/healthz` body.
    static func redisHealth(_ json: [String: Any]) -> [String: String] {
        (json["redis"] as? [String: Any] ?? [:]).compactMapValues { $0 as? String }
    }

    /// How many `WAIT` commands `server` ran (`INFO commandstats`).
    static func waitCalls(_ server: RedisServerProcess) throws -> Int {
        let info = try server.command("INFO", "commandstats")
        guard let line = info.split(whereSeparator: \.isNewline).first(where: { $0.hasPrefix("cmdstat_wait:") }),
              let calls = line.split(separator: ",").first?.split(separator: "=").last.flatMap({ Int($0) }) else { return 0 }
        return calls
    }

    /// The answer to one `message` of `peer`: its own echo (confirmed), or an error.
    static func answer(_ peer: TestPeer, user: String, text: String) async throws -> Event {
        try await peer.expect("the answer to \(text)") { e in
            (e.type == "message" && e.text == text && e.user == user) || e.type == "error"
        }
    }

    /// Sends `text` with `clientID` until its sender gets the echo (a confirmation); retries
    /// after `unavailable` and `unconfirmed` with the same client id. Returns the confirmed id
    /// and the error codes seen.
    static func sendUntilConfirmed(_ peer: TestPeer, user: String, room: String, text: String,
                                   clientID: String) async throws -> (id: Int64, errors: [String]) {
        var errors: [String] = []
        let deadline = ContinuousClock.now + RedisSentinelGroup.timeout * 2
        while true {
            try await peer.send(.message(room: room, text: text, clientID: clientID))
            let e = try await answer(peer, user: user, text: text)
            if e.type == "message" { return (try #require(e.id), errors) }
            let code = e.error?.code ?? "?"
            guard ["unavailable", "unconfirmed"].contains(code) else {
                throw TestFailure("\(user): unexpected error \(e.raw)")
            }
            if code == "unconfirmed" { #expect(e.error?.id != nil, "unconfirmed carries the id: \(e.raw)") }
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
        return try await peer.expect("\(name)'s history") { $0.type == "history" }
    }

    @Test func confirmedMessagesSurviveKillingTheMaster() async throws {
        let group = try await RedisSentinelGroup()
        defer { withExtendedLifetime(group) {} }
        let a = try await ChatServerProcess(redis: group.url())
        defer { a.child.signal(SIGKILL) }
        let b = try await ChatServerProcess(redis: group.url())
        defer { b.child.signal(SIGKILL) }
        for node in [a, b] { try await RedisScaleOutTests.waitUntilHealthy(node) }
        let masterPort = try group.masterPort()
        let before = try await Self.health(a)
        #expect(before.status == 200 && before.json["status"] as? String == "ok")
        #expect(Self.redisHealth(before.json) == ["mode": "sentinel", "master": "127.0.0.1:\(masterPort)"])

        let alice = try await TestPeer.connect("alice", url: a.wsURL)
        try await alice.send(.join(room: "lobby", user: "alice"))
        try await alice.expect("alice's history") { $0.type == "history" }
        let bob = try await TestPeer.connect("bob", url: b.wsURL)
        try await bob.send(.join(room: "lobby", user: "bob"))
        try await bob.expect("bob's history") { $0.type == "history" }

        // text → the id confirmed to its sender.
        var confirmed: [String: Int64] = [:]
        for i in 0..<5 {
            for (peer, user) in [(alice, "alice"), (bob, "bob")] {
                let text = "\(user) before \(i)"
                let result = try await Self.sendUntilConfirmed(peer, user: user, room: "lobby", text: text, clientID: "c-\(text)")
                #expect(result.errors.isEmpty, "healthy: confirmed at once, got \(result.errors)")
                confirmed[text] = result.id
            }
        }

        // kill -9 the master mid-conversation; it comes back empty (no persistence) and is made
        // a replica of the promoted one, as its operator would (Sentinel would too, but only 8 s
        // after its next INFO, and not at all while in TILT mode, which a starved machine puts
        // it in): a replica again, so confirmations can resume (with one replica, the promoted
        // master alone cannot confirm).
        let master = try #require(group.server(port: masterPort))
        let killedAt = ContinuousClock.now
        await master.kill()
        let sending = Task {
            var results: [(String, Int64, [String])] = []
            for i in 0..<6 {
                for (peer, user) in [(alice, "alice"), (bob, "bob")] {
                    let text = "\(user) during \(i)"
                    let r = try await Self.sendUntilConfirmed(peer, user: user, room: "lobby", text: text, clientID: "c-\(text)")
                    results.append((text, r.id, r.errors))
                }
            }
            return results
        }
        let promoted = try await group.waitForFailover(from: masterPort)
        try await master.restart()
        try master.command("REPLICAOF", "127.0.0.1", String(promoted.port))
        // A starved machine (two cores, ThreadSanitizer): the sentinels stall again and again,
        // each time over 2 s, so they spend the next minute in TILT mode and reconfigure nothing.
        let starving = Task {
            for _ in 0..<3 {
                try await group.stallSentinels(for: .milliseconds(2500))
                try await Task.sleep(for: .seconds(15))
            }
        }
        defer { starving.cancel() }
        try await RedisSentinelGroup.poll("the old master to be the new one's replica") {
            try promoted.command("INFO", "replication").contains("state=online")
        }
        let during = try await sending.value
        let flowingAgain = ContinuousClock.now - killedAt
        // A figure, not a test: sendUntilConfirmed's deadline is the stall guard.
        print("ChatSentinelTests: messages were confirmed again \(flowingAgain) after the master's kill")
        for (text, id, _) in during { confirmed[text] = id }
        #expect(during.contains { !$0.2.isEmpty }, "some message met the failover")

        for i in 0..<3 {
            for (peer, user) in [(alice, "alice"), (bob, "bob")] {
                let text = "\(user) after \(i)"
                confirmed[text] = try await Self.sendUntilConfirmed(peer, user: user, room: "lobby", text: text,
                                                                    clientID: "c-\(text)").id
            }
        }
        let after = try await Self.health(b)
        #expect(after.status == 200)
        #expect(Self.redisHealth(after.json) == ["mode": "sentinel", "master": "127.0.0.1:\(promoted.port)"])

        // Every confirmed message is in the history on both processes, once, with its id; the
        // re-joins' histories are complete.
        for (node, name) in [(a, "carol"), (b, "dave")] {
            let history = try await Self.rejoinHistory(name, server: node, room: "lobby", since: 0)
            #expect(history.complete == true, "\(name): \(history.raw)")
            let messages = history.messages ?? []
            for (text, id) in confirmed {
                let copies = messages.filter { $0.text == text }
                #expect(copies.count == 1 && copies.first?.id == id,
                        "\(name): \(text) (confirmed as \(id)) is there as \(copies.map { $0.id ?? -1 })")
            }
            let texts = messages.compactMap(\.text)
            #expect(Set(texts).count == texts.count, "\(name): no message stored twice")
        }
    }

    @Test func withoutTheReplicaNothingIsConfirmed() async throws {
        let group = try await RedisSentinelGroup()
        defer { withExtendedLifetime(group) {} }
        let folder = try ChatPaths.tempDirectory()
        let apiKey = try APIClients.keyFile(in: folder)
        let node = try await ChatServerProcess(redis: group.url(), extraArguments: ["--api-key-file", apiKey.path])
        defer { node.child.signal(SIGKILL) }
        try await RedisScaleOutTests.waitUntilHealthy(node)
        let masterPort = try group.masterPort()
        let master = try #require(group.server(port: masterPort))
        let replica = try #require(group.servers.first { $0.port != masterPort })

        let alice = try await TestPeer.connect("alice", url: node.wsURL)
        try await alice.send(.join(room: "lobby", user: "alice"))
        try await alice.expect("alice's history") { $0.type == "history" }
        let bob = try await TestPeer.connect("bob", url: node.wsURL)
        try await bob.send(.join(room: "lobby", user: "bob"))
        try await bob.expect("bob's history") { $0.type == "history" }
        let first = try await Self.sendUntilConfirmed(alice, user: "alice", room: "lobby", text: "replicated", clientID: "r1")
        #expect(first.errors.isEmpty)

        // A replica that stops answering (SIGSTOP: still connected, so still counted online):
        // the message is stored and broadcast, its sender gets `unconfirmed` with its id, never
        // the echo; a retry with the same client id once the replica is back is confirmed with
        // the same id, stored once.
        let replicaPID = try #require(replica.pid)
        kill(replicaPID, SIGSTOP)
        try await alice.send(.message(room: "lobby", text: "held", clientID: "h1"))
        let held = try await Self.answer(alice, user: "alice", text: "held")
        kill(replicaPID, SIGCONT)
        #expect(held.type == "error" && held.error?.code == "unconfirmed" && held.error?.type == "api_error", "\(held.raw)")
        let heldID = try #require(held.error?.id)
        let atBob = try await bob.expect("held, to the others") { $0.type == "message" && $0.text == "held" }
        #expect(atBob.id == heldID)
        let retried = try await Self.sendUntilConfirmed(alice, user: "alice", room: "lobby", text: "held", clientID: "h1")
        #expect(retried.id == heldID)
        // The echo of the unconfirmed message never reached its sender (the retry's answer is
        // the one copy), although the retry began another catch-up of the room.
        #expect(await alice.events.filter { $0.type == "message" && $0.text == "held" }.count == 1)

        // Eight senders at once, the replica hung: each gets `unconfirmed`; their waits share
        // rounds of one WAIT (2 s each), counted by the master. One WAIT per message, queued on
        // the one connection, would be 8 (and take at least 8 × 2 s).
        var senders: [TestPeer] = []
        for i in 0..<8 {
            let peer = try await TestPeer.connect("s\(i)", url: node.wsURL)
            try await peer.send(.join(room: "lobby", user: "s\(i)"))
            try await peer.expect("s\(i)'s history") { $0.type == "history" }
            senders.append(peer)
        }
        let waitsBefore = try Self.waitCalls(master)
        kill(replicaPID, SIGSTOP)
        for (i, peer) in senders.enumerated() {
            try await peer.send(.message(room: "lobby", text: "burst \(i)", clientID: "b\(i)"))
        }
        for (i, peer) in senders.enumerated() {
            let e = try await Self.answer(peer, user: "s\(i)", text: "burst \(i)")
            #expect(e.type == "error" && e.error?.code == "unconfirmed", "\(e.raw)")
        }
        let burstWaits = try Self.waitCalls(master) - waitsBefore
        kill(replicaPID, SIGCONT)
        #expect((1...4).contains(burstWaits), "eight unconfirmed answers took \(burstWaits) WAITs")
        for i in 0..<8 {
            _ = try await Self.sendUntilConfirmed(senders[i], user: "s\(i)", room: "lobby", text: "burst \(i)", clientID: "b\(i)")
        }
        for peer in senders { await peer.close() }

        // The HTTP POST the same way: 503 `unconfirmed` with the id, then 200 with that id.
        let messagesURL = "\(node.httpURL)v1/rooms/lobby/messages"
        let postBody = #"{"user":"deploy-bot","text":"via http","client_id":"p1"}"#
        kill(replicaPID, SIGSTOP)
        let unconfirmedPost = try await APIClients.python("POST", messagesURL, key: apiKey.key, body: postBody)
        kill(replicaPID, SIGCONT)
        #expect(unconfirmedPost.status == 503 && unconfirmedPost.errorCode == "unconfirmed", "\(unconfirmedPost.body)")
        let postID = ((unconfirmedPost.json["error"] as? [String: Any])?["id"] as? NSNumber)?.int64Value
        #expect(postID != nil, "\(unconfirmedPost.body)")
        var confirmedPost = try await APIClients.python("POST", messagesURL, key: apiKey.key, body: postBody)
        while confirmedPost.status == 503 {
            try await Task.sleep(for: .milliseconds(100))
            confirmedPost = try await APIClients.python("POST", messagesURL, key: apiKey.key, body: postBody)
        }
        #expect(confirmedPost.status == 200 && (confirmedPost.json["id"] as? NSNumber)?.int64Value == postID,
                "\(confirmedPost.body)")
        try await bob.expect("via http, once") { $0.type == "message" && $0.text == "via http" }

        // The replica gone: `unavailable`, nothing stored, nothing broadcast; /healthz degraded, 200.
        await replica.stop()
        try await RedisSentinelGroup.poll("the master to see no replica") {
            !(try master.command("INFO", "replication").contains("state=online"))
        }
        for i in 0..<3 {
            try await alice.send(.message(room: "lobby", text: "lonely \(i)", clientID: "l\(i)"))
            let e = try await Self.answer(alice, user: "alice", text: "lonely \(i)")
            #expect(e.type == "error" && e.error?.code == "unavailable", "\(e.raw)")
        }
        let health = try await Self.health(node)
        #expect(health.status == 200 && health.json["status"] as? String == "degraded", "\(health.json)")
        // A barrier: bob got everything published before it.
        try await bob.send(.typing(room: "lobby", isTyping: true))
        try await alice.expect("bob typing") { $0.type == "typing" }
        let history = try await Self.rejoinHistory("carol", server: node, room: "lobby", since: 0)
        let texts = (history.messages ?? []).compactMap(\.text)
        // The burst's senders raced each other: any order among them, each once.
        #expect(texts.count == 11 && Array(texts.prefix(2)) == ["replicated", "held"] && texts.last == "via http"
                && texts.dropFirst(2).dropLast().sorted() == (0..<8).map { "burst \($0)" }, "\(texts)")
        #expect(await bob.events.filter { $0.type == "message" && $0.text?.hasPrefix("lonely") == true }.isEmpty)
        #expect(await alice.events.filter { $0.type == "message" && $0.text?.hasPrefix("lonely") == true }.isEmpty)
    }

    /// `--redis-min-replicas-ack 0`: confirmations do not wait, even for a hung replica.
    @Test func anExplicitZeroDoesNotWaitForReplicas() async throws {
        let group = try await RedisSentinelGroup()
        defer { withExtendedLifetime(group) {} }
        let node = try await ChatServerProcess(redis: group.url(), extraArguments: ["--redis-min-replicas-ack", "0"])
        defer { node.child.signal(SIGKILL) }
        try await RedisScaleOutTests.waitUntilHealthy(node)
        let masterPort = try group.masterPort()
        let replica = try #require(group.servers.first { $0.port != masterPort })
        let alice = try await TestPeer.connect("alice", url: node.wsURL)
        try await alice.send(.join(room: "lobby", user: "alice"))
        try await alice.expect("alice's history") { $0.type == "history" }
        let replicaPID = try #require(replica.pid)
        kill(replicaPID, SIGSTOP)
        defer { kill(replicaPID, SIGCONT) }
        try await alice.send(.message(room: "lobby", text: "not waited for", clientID: "z1"))
        let e = try await Self.answer(alice, user: "alice", text: "not waited for")
        #expect(e.type == "message", "\(e.raw)")
    }

    @Test(arguments: [
        (["--redis-min-replicas-ack", "17", "--redis", "redis://127.0.0.1:1"], "--redis-min-replicas-ack must be 0...16"),
        (["--redis-min-replicas-ack", "1"], "--redis-min-replicas-ack needs --redis"),
    ])
    func badReplicaAckFlagsAreRefused(arguments: [String], message: String) async throws {
        let child = try ChildProcess(executable: try ChatPaths.binary(),
                                     arguments: ["serve", "--port", "0", "--db", ":memory:"].filter { _ in !arguments.contains("--redis") }
                                        + arguments)
        let status = await child.waitForExit()
        #expect(status != 0)
        #expect(child.stderrText.contains(message), "\(child.stderrText)")
    }

    @Test func standaloneHealthNamesTheServer() async throws {
        let redis = try await RedisServerProcess()
        let node = try await ChatServerProcess(redis: redis.url)
        defer { node.child.signal(SIGKILL) }
        try await RedisScaleOutTests.waitUntilHealthy(node)
        let up = try await Self.health(node)
        #expect(up.status == 200 && up.json["status"] as? String == "ok", "\(up.json)")
        #expect(Self.redisHealth(up.json) == ["mode": "standalone", "master": "127.0.0.1:\(redis.port)"])
        await redis.stop()
        let deadline = ContinuousClock.now + .seconds(60)
        var down = try await Self.health(node)
        while down.status != 503 && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            down = try await Self.health(node)
        }
        #expect(down.status == 503, "\(down.json)")
        #expect(down.json["status"] as? String == "degraded")
    }
}
