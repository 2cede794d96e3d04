import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Switchboard
import SwitchboardCore
import SwitchboardTestSupport
import ChatRoomCore
import Testing

/// `chat-room serve --redis`: two server processes sharing a real `redis-server` (Debian's,
/// started by the tests on a free port, persistence off) serve one set of rooms.
/// Serialized: each test runs three processes and a Redis.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct RedisScaleOutTests {
    /// Waits until the server's `/healthz` answers 200 with `"status":"ok"` (with --redis: both
    /// Redis connections up, every room re-subscribed, and as many replicas online as
    /// `--redis-min-replicas-ack`; a 200 `"degraded"` means Redis serves but pub/sub is down).
    static func waitUntilHealthy(_ server: ChatServerProcess, timeout: Duration = .seconds(60)) async throws {
        let deadline = ContinuousClock.now + timeout
        let url = try #require(URL(string: "http://127.0.0.1:\(server.port)/healthz"))
        while true {
            if let (data, response) = try? await URLSession.shared.data(from: url),
               (response as? HTTPURLResponse)?.statusCode == 200,
               let body = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
               body["status"] as? String == "ok" {
                return
            }
            if ContinuousClock.now >= deadline { throw TestFailure("\(url) never became healthy") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// `count` chat-room servers sharing `redis`, each healthy (Redis connected). The caller
    /// kills them.
    static func startNodes(_ count: Int, redis: RedisServerProcess,
                           extraArguments: [String] = []) async throws -> [ChatServerProcess] {
        var nodes: [ChatServerProcess] = []
        for _ in 0..<count {
            nodes.append(try await ChatServerProcess(redis: redis.url, extraArguments: extraArguments))
        }
        for node in nodes { try await waitUntilHealthy(node) }
        return nodes
    }

    /// How many events of `peer` satisfy `predicate` (after a later event proved delivery
    /// caught up: messages are delivered in order).
    static func count(_ peer: TestPeer, _ predicate: @Sendable (Event) -> Bool) async -> Int {
        await peer.events.filter(predicate).count
    }

    @Test func twoNodesShareMessagesTypingPresenceAndHistory() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }  // the server lives until the end of the test
        let nodes = try await Self.startNodes(2, redis: redis)
        defer { for node in nodes { node.child.signal(SIGKILL) } }
        let (a, b) = (nodes[0], nodes[1])

        let alice = try await TestPeer.connect("alice", url: a.wsURL)
        try await alice.send(.join(room: "lobby", user: "alice"))
        #expect(try await alice.expect("presence") { $0.type == "presence" }.users == ["alice"])
        try await alice.expect("history") { $0.type == "history" }

        let bob = try await TestPeer.connect("bob", url: b.wsURL)
        try await bob.send(.join(room: "lobby", user: "bob"))
        // Presence is shared: bob, on the other node, sees alice.
        #expect(try await bob.expect("presence") { $0.type == "presence" }.users == ["alice", "bob"])
        try await bob.expect("history") { $0.type == "history" }
        try await alice.expect("bob joined, through the other node") { $0.type == "join" && $0.user == "bob" }

        // A name is unique across nodes.
        let mallory = try await TestPeer.connect("mallory", url: a.wsURL)
        try await mallory.send(.join(room: "lobby", user: "Bob"))
        try await mallory.expectError(code: "name_taken", type: "conflict_error")

        // Messages cross nodes, with increasing integer ids, to the sender too.
        try await bob.send(.message(room: "lobby", text: "hello from b"))
        let m1 = try await alice.expect("bob's message") { $0.type == "message" && $0.text == "hello from b" }
        #expect(m1.user == "bob" && m1.room == "lobby")
        let m1Echo = try await bob.expect("own message") { $0.type == "message" && $0.text == "hello from b" }
        #expect(m1Echo.id == m1.id)
        try await alice.send(.message(room: "lobby", text: "hello from a"))
        let m2 = try await bob.expect("alice's message") { $0.type == "message" && $0.text == "hello from a" }
        let id1 = try #require(m1.id), id2 = try #require(m2.id)
        #expect(id2 > id1 && id2 < 1 << 53)

        // Typing crosses nodes, to the others only.
        try await alice.send(.typing(room: "lobby", isTyping: true))
        let typing = try await bob.expect("alice typing") { $0.type == "typing" }
        #expect(typing.user == "alice" && typing.isTyping == true)

        // A burst from both sides: every message exactly once at each client, in id order,
        // the same order on both nodes.
        for i in 0..<20 {
            try await alice.send(.message(room: "lobby", text: "a\(i)"))
            try await bob.send(.message(room: "lobby", text: "b\(i)"))
        }
        try await alice.send(.message(room: "lobby", text: "end"))
        // A barrier: once bob has seen the last of each sender's burst, every burst message is
        // stored; "fin", posted after that, has a higher id than all of them, and delivery is
        // in id order: whoever has "fin" has had every burst message.
        for text in ["a19", "b19", "end"] {
            try await bob.expect("\(text) at bob") { $0.type == "message" && $0.text == text }
        }
        try await bob.send(.message(room: "lobby", text: "fin"))
        for peer in [alice, bob] {
            try await peer.expect("fin") { $0.type == "message" && $0.text == "fin" }
            let burst = await peer.events.filter { $0.type == "message" && ($0.text?.first == "a" || $0.text?.first == "b") }
            #expect(burst.count == 40, "\(peer.name) got \(burst.count) of 40")
            #expect(Set(burst.compactMap(\.text)).count == 40)
            let ids = await peer.events.filter { $0.type == "message" }.compactMap(\.id)
            #expect(ids == ids.sorted() && Set(ids).count == ids.count)
            #expect(await Self.count(peer) { $0.type == "typing" && $0.user == "alice" } == (peer === bob ? 1 : 0))
            #expect(await Self.count(peer) { $0.type == "join" && $0.user == "bob" } == 1)
        }
        let orderA = await alice.events.filter { $0.type == "message" }.compactMap(\.id)
        let orderB = await bob.events.filter { $0.type == "message" }.compactMap(\.id)
        #expect(orderA == orderB)

        // History on join, on node A, includes the messages sent through node B.
        let carol = try await TestPeer.connect("carol", url: a.wsURL)
        try await carol.send(.join(room: "lobby", user: "carol"))
        #expect(try await carol.expect("presence") { $0.type == "presence" }.users == ["alice", "bob", "carol"])
        let history = try await carol.expect("history") { $0.type == "history" }
        let texts = (history.messages ?? []).compactMap(\.text)
        #expect(texts.contains("hello from b") && texts.contains("b19") && texts.contains("end") && texts.last == "fin")
        let historyIDs = (history.messages ?? []).compactMap(\.id)
        #expect(historyIDs == historyIDs.sorted() && historyIDs.count == texts.count)

        // Leaving crosses nodes too.
        try await bob.send(.leave(room: "lobby"))
        try await alice.expect("bob left") { $0.type == "leave" && $0.user == "bob" }
        try await carol.expect("bob left") { $0.type == "leave" && $0.user == "bob" }
    }

    @Test func redisRestartMidConversation() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }  // the server lives until the end of the test
        let nodes = try await Self.startNodes(2, redis: redis)
        defer { for node in nodes { node.child.signal(SIGKILL) } }
        let (a, b) = (nodes[0], nodes[1])

        let alice = try await TestPeer.connect("alice", url: a.wsURL)
        try await alice.send(.join(room: "ops", user: "alice"))
        try await alice.expect("history") { $0.type == "history" }
        let bob = try await TestPeer.connect("bob", url: b.wsURL)
        try await bob.send(.join(room: "ops", user: "bob"))
        try await bob.expect("history") { $0.type == "history" }
        try await alice.send(.message(room: "ops", text: "before"))
        let before = try await bob.expect("before") { $0.type == "message" && $0.text == "before" }

        // Redis goes away: a message cannot be stored, and the sender is told so.
        await redis.stop()
        try await alice.send(.message(room: "ops", text: "while down"))
        try await alice.expectError(code: "unavailable", type: "api_error")
        // It comes back empty (no persistence).
        try await redis.restart()
        // Both nodes reconnect by themselves and re-subscribe.
        try await Self.waitUntilHealthy(a)
        try await Self.waitUntilHealthy(b)
        try await alice.send(.message(room: "ops", text: "after"))
        let after = try await bob.expect("after, through the restarted Redis") { $0.type == "message" && $0.text == "after" }
        try await bob.send(.message(room: "ops", text: "reply"))
        try await alice.expect("reply") { $0.type == "message" && $0.text == "reply" }
        #expect(await Self.count(bob) { $0.text == "while down" } == 0)
        // Ids keep increasing although Redis lost every key.
        #expect(try #require(after.id) > (try #require(before.id)))
        // The nodes re-registered their users: presence survives the restart.
        let dave = try await TestPeer.connect("dave", url: a.wsURL)
        try await dave.send(.join(room: "ops", user: "dave"))
        let presence = try await dave.expect("presence") { $0.type == "presence" }
        #expect(Set(presence.users ?? []) == ["alice", "bob", "dave"])
    }

    @Test func killedNodesUsersLeaveWithinTheTTL() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }  // the server lives until the end of the test
        // 4 s: room for the ThreadSanitizer build, whose heartbeats (every 4/3 s) must not be late.
        let ttl = ["--presence-ttl", "4"]
        let nodes = try await Self.startNodes(3, redis: redis, extraArguments: ttl)
        defer { for node in nodes { node.child.signal(SIGKILL) } }
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])

        let alice = try await TestPeer.connect("alice", url: a.wsURL)
        try await alice.send(.join(room: "lobby", user: "alice"))
        try await alice.expect("history") { $0.type == "history" }
        let carol = try await TestPeer.connect("carol", url: c.wsURL)
        try await carol.send(.join(room: "lobby", user: "carol"))
        try await carol.expect("history") { $0.type == "history" }
        let bob = try await TestPeer.connect("bob", url: b.wsURL)
        try await bob.send(.join(room: "lobby", user: "bob"))
        try await bob.expect("history") { $0.type == "history" }
        try await alice.expect("bob joined") { $0.type == "join" && $0.user == "bob" }

        // Node B dies without a word.
        b.child.signal(SIGKILL)
        let started = ContinuousClock.now
        try await alice.expect("bob left when B's heartbeat expired", timeout: .seconds(60)) {
            $0.type == "leave" && $0.user == "bob"
        }
        try await carol.expect("bob left (carol)") { $0.type == "leave" && $0.user == "bob" }
        let waited = ContinuousClock.now - started
        // One survivor emits the leave: after a later message, each client has exactly one.
        try await alice.send(.message(room: "lobby", text: "still here"))
        try await alice.expect("marker") { $0.type == "message" && $0.text == "still here" }
        try await carol.expect("marker") { $0.type == "message" && $0.text == "still here" }
        #expect(await Self.count(alice) { $0.type == "leave" && $0.user == "bob" } == 1)
        #expect(await Self.count(carol) { $0.type == "leave" && $0.user == "bob" } == 1)
        // And the name is free again.
        let bob2 = try await TestPeer.connect("bob2", url: a.wsURL)
        try await bob2.send(.join(room: "lobby", user: "bob"))
        #expect(Set(try await bob2.expect("presence") { $0.type == "presence" }.users ?? []) == ["alice", "carol", "bob"])
        print("bob left \(waited) after node B was killed (presence TTL 4 s)")
    }

    @Test func redisAndDatabaseExcludeEachOther() async throws {
        let dir = try ChatPaths.tempDirectory()
        let child = try ChildProcess(executable: try ChatPaths.binary(),
                                     arguments: ["serve", "--port", "0", "--redis", "redis://127.0.0.1:1",
                                                 "--db", dir.appendingPathComponent("x.sqlite").path])
        let status = await child.waitForExit()
        #expect(status != 0)
        #expect(child.stderrText.contains("--redis and --db exclude each other"))
    }

    /// With a Redis Cluster, a prefix bringing its own hash tag is refused at start-up with a
    /// clear reason (each room's keys carry theirs), before anything connects.
    @Test func aClusterPrefixWithABraceIsRefusedClearly() async throws {
        let child = try ChildProcess(executable: try ChatPaths.binary(),
                                     arguments: ["serve", "--port", "0", "--redis", "redis-cluster://127.0.0.1:1",
                                                 "--redis-prefix", "app{1}:"])
        let status = await child.waitForExit()
        #expect(status != 0)
        #expect(child.stderrText.contains("the prefix may not contain { or }"), "\(child.stderrText)")
        #expect(!child.stderrText.contains("cannot connect"), "\(child.stderrText)")
    }
}
