import Foundation
import Switchboard
import SwitchboardCore
import SwitchboardTestSupport
import ChatRoomCore
import Testing

/// A re-join takes over only its own stale presence (docs/chat-protocol.md, "Presence"): the
/// `presence` answering a `join` carries a `rejoinKey`, and a `join` with `since` takes over a
/// name held by another connection only with that key. With SQLite (one process) and with
/// Redis (two processes: the re-join reaches the other one).
/// Serialized: the Redis cases start a `redis-server` and two chat servers.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct ChatRejoinKeyTests {
    typealias Backend = ChatResumeTests.Backend

    /// Two server URLs sharing rooms: the same server twice with SQLite, two processes with
    /// Redis. The caller kills the servers (and keeps the Redis alive).
    static func servers(_ backend: Backend) async throws -> ([ChatServerProcess], RedisServerProcess?) {
        switch backend {
        case .sqlite:
            let (server, _) = try await ChatResumeTests.server(.sqlite, extraArguments: ChatResumeTests.noRateLimit)
            return ([server, server], nil)
        case .redis:
            let redis = try await RedisServerProcess()
            return (try await RedisScaleOutTests.startNodes(2, redis: redis, extraArguments: ChatResumeTests.noRateLimit), redis)
        }
    }

    /// A raw `join` line (the fields given, nothing else).
    static func join(room: String, user: String, since: Int64? = nil, rejoinKey: String? = nil) -> String {
        struct Line: Encodable { var type = "join"; var room: String; var user: String; var since: Int64?; var rejoinKey: String? }
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let data = (try? encoder.encode(Line(room: room, user: user, since: since, rejoinKey: rejoinKey))) ?? Data()
        return String(decoding: data, as: UTF8.self) + "\n"
    }

    /// Joins `room` as `user` (a first join) and returns the `rejoinKey` of its presence.
    static func joinAndKey(_ peer: TestPeer, room: String, user: String) async throws -> String {
        try await peer.send(.join(room: room, user: user))
        let presence = try await peer.expect("\(user)'s presence in \(room)") { $0.type == "presence" && $0.room == room }
        try await peer.expect("\(user)'s history in \(room)") { $0.type == "history" && $0.room == room }
        return try #require(presence.rejoinKey, "no rejoinKey in \(presence)")
    }

    /// 128 bits, base64url without padding: 22 characters of A–Z a–z 0–9 - _.
    static func isWellFormedKey(_ key: String) -> Bool {
        key.utf8.count == 22 && key.unicodeScalars.allSatisfy {
            ("A"..."Z").contains($0) || ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" || $0 == "_"
        }
    }

    /// A third connection sends a re-join under alice's name (with Redis: through the other
    /// process) without the key, with a made-up key and with bob's key: `name_taken` each time,
    /// and alice, still connected, keeps receiving bob's messages; nothing reaches the intruder.
    @Test(arguments: Backend.allCases)
    func rejoinWithoutTheOwnersKeyGetsNameTaken(_ backend: Backend) async throws {
        let (nodes, redis) = try await Self.servers(backend)
        defer { for node in nodes { node.child.signal(SIGKILL) }; withExtendedLifetime(redis) {} }
        let alice = try await TestPeer.connect("alice", url: nodes[0].wsURL)
        let aliceKey = try await Self.joinAndKey(alice, room: "r", user: "alice")
        let bob = try await TestPeer.connect("bob", url: nodes[0].wsURL)
        let bobKey = try await Self.joinAndKey(bob, room: "r", user: "bob")
        #expect(Self.isWellFormedKey(aliceKey) && Self.isWellFormedKey(bobKey), "\(aliceKey) \(bobKey)")
        #expect(aliceKey != bobKey)
        let first = try await ChatResumeTests.post(alice, "r", "before")

        let mallory = try await TestPeer.connect("mallory", url: nodes[1].wsURL)
        for (what, key) in [("no key", nil), ("a made-up key", "AAAAAAAAAAAAAAAAAAAAAA"), ("bob's key", bobKey),
                            ("alice's key with one character changed", String(aliceKey.dropLast()) + (aliceKey.last == "A" ? "B" : "A"))] {
            for since in [Int64(0), first] {
                try await mallory.sendRaw(Self.join(room: "r", user: "alice", since: since, rejoinKey: key))
                let e = try await mallory.expectError(code: "name_taken", type: "conflict_error")
                #expect(e.error?.message.contains("alice") == true, "\(what): \(e)")
            }
        }
        // Case-insensitively too.
        try await mallory.sendRaw(Self.join(room: "r", user: "ALICE", since: 0))
        try await mallory.expectError(code: "name_taken", type: "conflict_error")

        // alice is still alice: she gets bob's messages, bob gets hers, as hers.
        let toAlice = try await ChatResumeTests.post(bob, "r", "still there, alice?")
        try await alice.expect("bob's message after the attempts") { $0.type == "message" && $0.id == toAlice }
        let fromAlice = try await ChatResumeTests.post(alice, "r", "yes")
        let seen = try await bob.expect("alice's reply") { $0.type == "message" && $0.id == fromAlice }
        #expect(seen.user == "alice")
        // The intruder joined nothing and got nothing of the room.
        let malloryEvents = await mallory.events
        #expect(malloryEvents.allSatisfy { $0.type == "error" }, "\(malloryEvents)")
        // Nobody saw alice leave or join again.
        for peer in [alice, bob] {
            let events = await peer.events
            #expect(!events.contains { $0.type == "leave" }, "\(peer.name): \(events)")
            #expect(events.filter { $0.type == "join" && $0.user == "alice" }.count == (peer === alice ? 1 : 0), "\(peer.name): \(events)")
        }
        // A key is sent to its owner only: never in anyone else's events.
        #expect(!(await bob.events).contains { $0.raw.contains(aliceKey) })
        #expect(!(await alice.events).contains { $0.raw.contains(bobKey) })
    }

    /// alice's old connection is still open (its end not noticed yet) when she re-joins from a
    /// new one (with Redis: through the other process) with her key: the new connection takes
    /// the name over, keeps the key, gets the messages; the others see no `leave` and no new
    /// `join`, not even once the old connection ends. Then, through a TCP relay cut under her,
    /// she re-joins again with the key (on the first server again): it works whether or not the
    /// server noticed the cut first.
    @Test(arguments: Backend.allCases)
    func rejoinWithTheKeyTakesOverTheStalePresence(_ backend: Backend) async throws {
        let (nodes, redis) = try await Self.servers(backend)
        defer { for node in nodes { node.child.signal(SIGKILL) }; withExtendedLifetime(redis) {} }
        let old = try await TestPeer.connect("alice-old", url: nodes[0].wsURL)
        let key = try await Self.joinAndKey(old, room: "r", user: "alice")
        // A room the old connection holds alone: its `leave` there says the server handled its end.
        _ = try await Self.joinAndKey(old, room: "s", user: "alice")
        let bob = try await TestPeer.connect("bob", url: nodes[0].wsURL)
        _ = try await Self.joinAndKey(bob, room: "r", user: "bob")
        let watcher = try await TestPeer.connect("watcher", url: nodes[1].wsURL)
        _ = try await Self.joinAndKey(watcher, room: "s", user: "watcher")
        let seen = try await ChatResumeTests.post(old, "r", "m1")
        let missed = try await ChatResumeTests.post(bob, "r", "m2")

        let new = try await TestPeer.connect("alice-new", url: nodes[1].wsURL)
        try await new.sendRaw(Self.join(room: "r", user: "alice", since: seen, rejoinKey: key))
        let presence = try await new.expect("the re-join's presence") { $0.type == "presence" }
        #expect(presence.users == ["alice", "bob"])
        #expect(presence.rejoinKey == key, "a take-over keeps the key: \(presence)")
        let history = try await new.expect("the re-join's history") { $0.type == "history" }
        #expect(history.messages?.map(\.id) == [missed] && history.complete == true)

        let fromNew = try await ChatResumeTests.post(new, "r", "from the new connection")
        #expect(try await bob.expect("alice's new message") { $0.type == "message" && $0.id == fromNew }.user == "alice")
        let toNew = try await ChatResumeTests.post(bob, "r", "welcome back")
        try await new.expect("bob's message on the new connection") { $0.type == "message" && $0.id == toNew }

        // The old connection ends: it leaves "s" (which it still held), not "r" (taken over).
        await old.close()
        try await watcher.expect("the old connection's leave in s") { $0.type == "leave" && $0.room == "s" && $0.user == "alice" }
        let marker = try await ChatResumeTests.post(new, "r", "after the old one ended")
        try await bob.expect("the marker") { $0.type == "message" && $0.id == marker }
        let bobEvents = await bob.events
        #expect(!bobEvents.contains { $0.type == "leave" }, "\(bobEvents)")
        #expect(!bobEvents.contains { $0.type == "join" && $0.user == "alice" }, "\(bobEvents)")
        // alice is still listed, once.
        let carol = try await TestPeer.connect("carol", url: nodes[0].wsURL)
        try await carol.send(.join(room: "r", user: "carol"))
        #expect(try await carol.expect("carol's presence") { $0.type == "presence" }.users == ["alice", "bob", "carol"])

        // Through a relay to the first server, cut: the re-join with the key works.
        let relay = try TCPRelay(targetPort: nodes[0].port)
        defer { relay.stop() }
        let relayed = try await TestPeer.connect("alice-relayed", url: "ws://127.0.0.1:\(relay.port)/v1/ws")
        try await relayed.sendRaw(Self.join(room: "r", user: "alice", since: marker, rejoinKey: key))
        #expect(try await relayed.expect("the relayed re-join's presence") { $0.type == "presence" }.rejoinKey == key)
        try await relayed.expect("the relayed re-join's history") { $0.type == "history" }
        #expect(relay.cutAll() == 1)
        _ = try await relayed.waitForClose()
        let again = try await TestPeer.connect("alice-again", url: nodes[0].wsURL)
        try await again.sendRaw(Self.join(room: "r", user: "alice", since: marker, rejoinKey: key))
        let p = try await again.expect("the presence after the cut") { $0.type == "presence" || $0.type == "error" }
        #expect(p.type == "presence" && p.users?.filter { $0 == "alice" }.count == 1, "\(p)")
        // Taken over (the key is kept), or a fresh join after the cut was noticed (a new key).
        #expect(p.rejoinKey.map(Self.isWellFormedKey) == true)
        try await again.expect("the history after the cut") { $0.type == "history" }
        let last = try await ChatResumeTests.post(bob, "r", "and again")
        try await again.expect("bob's message after the cut") { $0.type == "message" && $0.id == last }
    }
}
