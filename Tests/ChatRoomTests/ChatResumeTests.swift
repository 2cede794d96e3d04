import Foundation
import Switchboard
import SwitchboardCore
import SwitchboardTestSupport
import ChatRoomCore
import Testing

/// Re-joining with `since` (docs/chat-protocol.md, "Reconnecting without losing messages"):
/// with SQLite and with Redis, by our peers, by the terminal client and by the web page in
/// Chromium, across connections cut by a TCP relay.
/// Serialized: the Redis cases start a `redis-server`, the browser case a Chromium.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct ChatResumeTests {
    enum Backend: String, CustomStringConvertible, CaseIterable {
        case sqlite, redis
        var description: String { rawValue }
    }

    /// A server of `backend` (and the Redis it uses, kept alive by the caller).
    static func server(_ backend: Backend, extraArguments: [String] = []) async throws -> (ChatServerProcess, RedisServerProcess?) {
        switch backend {
        case .sqlite:
            let db = try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite")
            return (try await ChatServerProcess(db: db, extraArguments: extraArguments), nil)
        case .redis:
            let redis = try await RedisServerProcess()
            let node = try await RedisScaleOutTests.startNodes(1, redis: redis, extraArguments: extraArguments)[0]
            return (node, redis)
        }
    }

    /// alice talks faster than the default rate limit (10 per second).
    static let noRateLimit = ["--rate", "10000", "--burst", "10000"]

    /// Sends `text` as `peer` in `room` and returns its id (from the sender's own copy).
    static func post(_ peer: TestPeer, _ room: String, _ text: String) async throws -> Int64 {
        try await peer.send(.message(room: room, text: text))
        let echo = try await peer.expect("echo of \(text)") { $0.type == "message" && $0.text == text }
        return try #require(echo.id)
    }

    @Test(arguments: Backend.allCases)
    func sinceGivesWhatWasMissedCompleteAndOnce(_ backend: Backend) async throws {
        let (server, redis) = try await Self.server(backend)
        defer { server.child.signal(SIGKILL); withExtendedLifetime(redis) {} }
        let alice = try await TestPeer.connect("alice", url: server.wsURL)
        try await alice.send(.join(room: "r", user: "alice"))
        try await alice.expect("alice's history") { $0.type == "history" }
        var ids: [Int64] = []
        for text in ["m1", "m2", "m3"] { ids.append(try await Self.post(alice, "r", text)) }
        #expect(ids == ids.sorted() && Set(ids).count == 3)

        // bob saw m1: he gets m2 and m3, complete.
        let bob = try await TestPeer.connect("bob", url: server.wsURL)
        try await bob.send(.join(room: "r", user: "bob", since: ids[0]))
        let bobPresence = try await bob.expect("presence") { $0.type == "presence" }
        #expect(bobPresence.users == ["alice", "bob"])
        let bobKey = try #require(bobPresence.rejoinKey)
        let history = try await bob.expect("history after m1") { $0.type == "history" }
        #expect(history.messages?.map(\.text) == ["m2", "m3"])
        #expect(history.messages?.map(\.id) == [ids[1], ids[2]])
        #expect(history.complete == true)

        // Saw everything, or more than there is: an empty, complete history.
        for (name, since) in [("carol", ids[2]), ("dave", ids[2] + 1_000_000_000)] {
            let peer = try await TestPeer.connect(name, url: server.wsURL)
            try await peer.send(.join(room: "r", user: name, since: since))
            let h = try await peer.expect("\(name)'s history") { $0.type == "history" }
            #expect(h.messages?.isEmpty == true)
            #expect(h.complete == true)
            await peer.close()
        }
        // Without since: as before, no complete field.
        let eve = try await TestPeer.connect("eve", url: server.wsURL)
        try await eve.send(.join(room: "r", user: "eve"))
        let plain = try await eve.expect("eve's history") { $0.type == "history" }
        #expect(plain.messages?.map(\.text) == ["m1", "m2", "m3"])
        #expect(plain.complete == nil)

        // Not a non-negative integer: invalid_field, nothing joined.
        for bad in ["-1", "1.5", "\"7\"", "true", "18014398509481984"] {
            try await eve.sendRaw("{\"type\":\"join\",\"room\":\"other\",\"user\":\"eve\",\"since\":\(bad)}\n")
            let e = try await eve.expectError(code: "invalid_field", type: "invalid_request_error")
            #expect(e.error?.message.contains("since") == true, "since \(bad): \(e)")
        }

        // A re-join under bob's name with his key (his old connection not noticed gone) takes
        // it over: no name_taken, bob listed once, no join or leave for the others.
        let bob2 = try await TestPeer.connect("bob2", url: server.wsURL)
        try await bob2.sendRaw(ChatRejoinKeyTests.join(room: "r", user: "bob", since: ids[2], rejoinKey: bobKey))
        let users = try await bob2.expect("bob2's presence") { $0.type == "presence" }.users ?? []
        #expect(users.filter { $0 == "bob" }.count == 1)
        let h2 = try await bob2.expect("bob2's history") { $0.type == "history" }
        #expect(h2.messages?.isEmpty == true && h2.complete == true)
        await bob.close()
        _ = try await bob.waitForClose()
        // The old connection is gone: it left nothing behind and took nobody with it.
        let id4 = try await Self.post(bob2, "r", "m4 from bob's new connection")
        try await alice.expect("m4") { $0.id == id4 }
        let frank = try await TestPeer.connect("frank", url: server.wsURL)
        try await frank.send(.join(room: "r", user: "frank"))
        #expect(try await frank.expect("frank's presence") { $0.type == "presence" }.users?.contains("bob") == true)
        try await bob2.send(.message(room: "r", text: "m5"))
        try await alice.expect("m5") { $0.text == "m5" }
        let aliceEvents = await alice.events
        #expect(!aliceEvents.contains { $0.type == "leave" && $0.user == "bob" }, "\(aliceEvents)")
        #expect(aliceEvents.filter { $0.type == "join" && $0.user == "bob" }.count == 1, "\(aliceEvents)")
        #expect(await server.stop() == 0)
    }

    @Test func moreThan500MissedGivesTheNewest500Incomplete() async throws {
        let (server, _) = try await Self.server(.sqlite, extraArguments: ["--rate", "10000", "--burst", "10000"])
        defer { server.child.signal(SIGKILL) }
        let alice = try await TestPeer.connect("alice", url: server.wsURL)
        try await alice.send(.join(room: "r", user: "alice"))
        try await alice.expect("history") { $0.type == "history" }
        try await alice.sendRaw((0..<505).map { ChatCommand.message(room: "r", text: "m\($0)").line }.joined())
        try await alice.expect("the last echo") { $0.text == "m504" }
        let bob = try await TestPeer.connect("bob", url: server.wsURL)
        try await bob.send(.join(room: "r", user: "bob", since: 0))
        let history = try await bob.expect("history") { $0.type == "history" }
        #expect(history.messages?.count == 500)
        #expect(history.messages?.first?.text == "m5")
        #expect(history.messages?.last?.text == "m504")
        #expect(history.complete == false)
        #expect(await server.stop() == 0)
    }

    /// The history answering a re-join is bounded in bytes as a history page is
    /// (`ChatLimits.maxHistoryPageBytes`, 768 KiB of text as JSON escapes it), not only in count:
    /// 500 missed messages of 2,000 quotes each (4,000 bytes escaped) would make a 2 MB line,
    /// more than the 1 MiB line limit of Switchboard's clients. The newest that fit are sent,
    /// `complete: false`; the rest is one `history` page away.
    @Test(arguments: Backend.allCases)
    func theHistoryOfAReJoinIsBoundedInBytes(_ backend: Backend) async throws {
        let (server, redis) = try await Self.server(backend, extraArguments: Self.noRateLimit)
        defer { server.child.signal(SIGKILL); withExtendedLifetime(redis) {} }
        let alice = try await TestPeer.connect("alice", url: server.wsURL)
        try await alice.send(.join(room: "r", user: "alice"))
        try await alice.expect("history") { $0.type == "history" }
        let quotes = String(repeating: "\"", count: ChatLimits.maxTextLength - 8)
        try await alice.sendRaw((0..<500).map { ChatCommand.message(room: "r", text: "\($0 + 1000)" + quotes).line }.joined())
        try await alice.expect("the last echo") { $0.text == "1499" + quotes }
        let bob = try await TestPeer.connect("bob", url: server.wsURL)
        try await bob.send(.join(room: "r", user: "bob", since: 0))
        let history = try await bob.expect("history") { $0.type == "history" }
        let messages = history.messages ?? []
        let escaped = messages.reduce(0) { $0 + 2 * ($1.text ?? "").utf8.count }
        #expect(!messages.isEmpty && messages.count < 500, "\(messages.count) messages")
        #expect(escaped <= ChatLimits.maxHistoryPageBytes, "\(escaped) bytes of escaped text")
        #expect(messages.last?.text == "1499" + quotes)
        #expect(history.complete == false)
        #expect(await server.stop() == 0)
    }

    /// A message with U+0000 inside is stored whole: a re-join with `since` and a plain join
    /// get it in `history` exactly as the live broadcast had it.
    @Test(arguments: Backend.allCases)
    func messageWithNULIsStoredAndReturnedWhole(_ backend: Backend) async throws {
        let (server, redis) = try await Self.server(backend)
        defer { server.child.signal(SIGKILL); withExtendedLifetime(redis) {} }
        let alice = try await TestPeer.connect("alice", url: server.wsURL)
        try await alice.send(.join(room: "r", user: "alice"))
        try await alice.expect("alice's history") { $0.type == "history" }
        let before = try await Self.post(alice, "r", "first")
        let text = "before\u{0000}after \u{0000}\u{0000} end"
        let id = try await Self.post(alice, "r", text)      // the live echo has it whole

        let bob = try await TestPeer.connect("bob", url: server.wsURL)
        try await bob.send(.join(room: "r", user: "bob", since: before))
        let resumed = try await bob.expect("history after the first message") { $0.type == "history" }
        #expect(resumed.messages?.map(\.id) == [id])
        #expect(resumed.messages?.first?.text == text, "\(resumed)")
        let carol = try await TestPeer.connect("carol", url: server.wsURL)
        try await carol.send(.join(room: "r", user: "carol"))
        let plain = try await carol.expect("carol's history") { $0.type == "history" }
        #expect(plain.messages?.map(\.text) == ["first", text], "\(plain)")
        #expect(await server.stop() == 0)
    }

    /// A server without rate limit, a relay in front of it, and alice in room `r` (connected
    /// directly) who already said "before".
    static func relayedRoom(_ backend: Backend) async throws -> (ChatServerProcess, RedisServerProcess?, TCPRelay, TestPeer) {
        let (server, redis) = try await Self.server(backend, extraArguments: Self.noRateLimit)
        let relay = try TCPRelay(targetPort: server.port)
        let alice = try await TestPeer.connect("alice", url: server.wsURL)
        try await alice.send(.join(room: "r", user: "alice"))
        try await alice.expect("history") { $0.type == "history" }
        _ = try await Self.post(alice, "r", "before")
        return (server, redis, relay, alice)
    }

    /// The terminal client through a relay cut three times while alice keeps talking: every
    /// message is printed exactly once, in order.
    @Test(arguments: Backend.allCases)
    func terminalClientGetsEveryMessageOnceAcrossCuts(_ backend: Backend) async throws {
        let (server, redis, relay, alice) = try await Self.relayedRoom(backend)
        defer { server.child.signal(SIGKILL); relay.stop(); withExtendedLifetime(redis) {} }

        let terminal = try ChildProcess(executable: try ChatPaths.binary(),
                                        arguments: ["join", "--url", "ws://127.0.0.1:\(relay.port)/v1/ws",
                                                    "--room", "r", "--user", "term"])
        defer { terminal.signal(SIGKILL) }
        try await terminal.waitForLine("terminal history") { $0 == "[r] alice: before" }

        let count = 60
        let sender = Task {
            for i in 0..<count { _ = try await Self.post(alice, "r", "m\(i)") }
        }
        // Cut when the terminal has printed m10, m25 and m40 (mid-stream: alice goes on), and
        // wait for each reconnection before the next cut.
        for (cut, after) in [10, 25, 40].enumerated() {
            try await terminal.waitForLine("m\(after) before cut \(cut + 1)") { $0 == "[r] alice: m\(after)" }
            #expect(relay.cutAll() >= 1)
            try await terminal.waitForLine("reconnection \(cut + 1)") { _ in
                terminal.lines.filter { $0 == "* reconnected" }.count >= cut + 1
            }
        }
        try await sender.value
        try await terminal.waitForLine("the last message") { $0 == "[r] alice: m\(count - 1)" }
        let printed = terminal.lines.filter { $0.hasPrefix("[r] alice: ") }.map { String($0.dropFirst("[r] alice: ".count)) }
        #expect(printed == ["before"] + (0..<count).map { "m\($0)" })
        #expect(!terminal.lines.contains { $0.contains("were missed") })
        // Every re-join was accepted (with its key when the old presence was still there).
        #expect(!terminal.lines.contains { $0.hasPrefix("! ") }, "\(terminal.lines.filter { $0.hasPrefix("! ") })")
        #expect(relay.acceptedCount == 4)
        terminal.closeStdin()
        #expect(await terminal.waitForExit() == 0)
        #expect(await server.stop() == 0)
    }

    /// The web page in Chromium through a relay, cut twice while alice keeps talking.
    @Test func browserPageGetsEveryMessageOnceAcrossCuts() async throws {
        try await Python.require(module: "selenium", hint: "pip install selenium; apt-get install -y chromium chromium-driver")
        let (server, _, relay, alice) = try await Self.relayedRoom(.sqlite)
        defer { server.child.signal(SIGKILL); relay.stop() }

        let browser = try ChildProcess(executable: URL(fileURLWithPath: "/usr/bin/env"),
                                       arguments: ["python3", "-u", ChatPaths.peers.appendingPathComponent("browser_resume.py").path,
                                                   "http://127.0.0.1:\(relay.port)/", "r", "web"])
        defer { browser.signal(SIGKILL) }
        try await browser.waitForLine(timeout: .seconds(180), "the page to join") { $0 == "joined" }

        let count = 40
        let sender = Task {
            for i in 0..<count { _ = try await Self.post(alice, "r", "m\(i)") }
        }
        for (cut, after) in [10, 25].enumerated() {
            browser.write("messages alice \(after + 2)\n")     // "before", m0 … m\(after)
            try await browser.waitForLine(timeout: .seconds(120), "m\(after) on the page") {
                $0.hasPrefix("messages ") && $0.contains("\"m\(after)\"")
            }
            #expect(relay.cutAll() >= 1)
            browser.write("reconnects \(cut + 1)\n")
            try await browser.waitForLine(timeout: .seconds(120), "reconnection \(cut + 1)") { $0 == "reconnected \(cut + 1)" }
        }
        try await sender.value
        browser.write("messages alice \(count + 1)\nmissed\n")
        let missed = try await browser.waitForLine(timeout: .seconds(120), "the missed answer") { $0.hasPrefix("missed ") }
        #expect(missed == "missed no")
        let final = try #require(browser.lines.last { $0.hasPrefix("messages ") && $0.contains("\"m\(count - 1)\"") })
        let shown = try JSONDecoder().decode([String].self, from: Data(final.dropFirst("messages ".count).utf8))
        #expect(shown == ["before"] + (0..<count).map { "m\($0)" })
        browser.closeStdin()
        #expect(await browser.waitForExit(timeout: .seconds(60)) == 0, "\(browser.stderrText.suffix(2000))")
        #expect(await server.stop() == 0)
    }

    /// This process's Redis pub/sub connection is lost while another process's client talks:
    /// once it is back, its clients get what they missed (a `history`), exactly once, in order.
    @Test func redisPubSubLossIsRecoveredForConnectedClients() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }
        let nodes = try await RedisScaleOutTests.startNodes(2, redis: redis)
        defer { for node in nodes { node.child.signal(SIGKILL) } }
        let alice = try await TestPeer.connect("alice", url: nodes[0].wsURL)
        let bob = try await TestPeer.connect("bob", url: nodes[1].wsURL)
        for (peer, name) in [(alice, "alice"), (bob, "bob")] {
            try await peer.send(.join(room: "r", user: name))
            try await peer.expect("\(name)'s history") { $0.type == "history" }
        }
        _ = try await Self.post(alice, "r", "before")
        try await bob.expect("before") { $0.text == "before" }

        // Subscriptions refused, then every pub/sub connection dropped: the message bob sends
        // now is stored in the room's stream, but no process receives it live.
        _ = try redis.command("ACL", "SETUSER", "default", "-subscribe")
        _ = try redis.command("CLIENT", "KILL", "TYPE", "pubsub")
        try await bob.send(.message(room: "r", text: "during"))
        // Redis accepts subscriptions again: both processes subscribe again by themselves.
        _ = try redis.command("ACL", "SETUSER", "default", "+subscribe")
        for node in nodes { try await RedisScaleOutTests.waitUntilHealthy(node) }
        try await bob.send(.message(room: "r", text: "after"))
        for peer in [alice, bob] {
            try await peer.expect("after") { $0.type == "message" && $0.text == "after" }
            // What each saw, live or in a history, in order: "during" arrived once.
            let events = await peer.events
            let texts = events.flatMap { e -> [String] in
                switch e.type {
                case "message": e.text.map { [$0] } ?? []
                case "history": (e.messages ?? []).compactMap(\.text)
                default: []
                }
            }
            #expect(texts == ["before", "during", "after"], "\(peer.name): \(events)")
        }
    }
}
