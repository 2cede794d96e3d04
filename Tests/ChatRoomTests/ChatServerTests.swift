import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Switchboard
import SwitchboardCore
import ChatRoomCore
import Testing

/// End to end against the built `chat-room` binary: two Swift clients (SocketAdapter + ChatCommand)
/// and one Python `websockets` client.
/// The time limit is a hang guard only: each wait inside has its own (60 s) bound.
@Suite(.timeLimit(.minutes(5)))
struct ChatServerTests {
    @Test func threeClientsJoinMessageTypingLeavePresenceHistory() async throws {
        let dir = try ChatPaths.tempDirectory()
        let server = try await ChatServerProcess(db: dir.appendingPathComponent("chat.sqlite"))
        defer { server.child.signal(SIGKILL) }

        let alice = try await TestPeer.connect("alice", url: server.wsURL)
        try await alice.send(.join(room: "general", user: "alice"))
        let p1 = try await alice.expect("presence") { $0.type == "presence" }
        #expect(p1.users == ["alice"] && p1.room == "general")
        let h1 = try await alice.expect("history") { $0.type == "history" }
        #expect(h1.messages?.isEmpty == true)

        let bob = try await TestPeer.connect("bob", url: server.wsURL)
        try await bob.send(.join(room: "general", user: "bob"))
        #expect(try await bob.expect("presence") { $0.type == "presence" }.users == ["alice", "bob"])
        let joined = try await alice.expect("bob joined") { $0.type == "join" && $0.user == "bob" }
        #expect(joined.id != nil && (joined.ts ?? 0) > 1_600_000_000_000 && joined.room == "general")

        let carol = try await Python.chatPeer(url: server.wsURL)
        defer { carol.signal(SIGKILL) }
        carol.write(#"{"type":"join","room":"general","user":"carol"}"# + "\n")
        let carolPresence = try await carol.waitForLine("python presence") { $0.contains(#""type":"presence""#) }
        #expect(Event.parse(carolPresence)?.users == ["alice", "bob", "carol"])
        try await alice.expect("carol joined") { $0.type == "join" && $0.user == "carol" }
        try await bob.expect("carol joined") { $0.type == "join" && $0.user == "carol" }

        // Messages reach everyone in the room, the sender included (with id and ts).
        try await alice.send(.message(room: "general", text: "hello all"))
        let m1 = try await bob.expect("alice's message") { $0.type == "message" && $0.text == "hello all" }
        #expect(m1.user == "alice" && m1.id != nil && m1.ts != nil)
        let echo = try await alice.expect("own message") { $0.type == "message" && $0.text == "hello all" }
        #expect(echo.id == m1.id)
        try await carol.waitForLine("python gets alice's message") { $0.contains("hello all") && $0.contains(#""user":"alice""#) }
        carol.write(#"{"type":"message","room":"general","text":"hi from python"}"# + "\n")
        let m2 = try await alice.expect("carol's message") { $0.type == "message" && $0.text == "hi from python" }
        #expect(m2.user == "carol" && m2.id! > m1.id!)
        try await bob.expect("carol's message") { $0.type == "message" && $0.user == "carol" }

        // Typing goes to the others only.
        try await bob.send(.typing(room: "general", isTyping: true))
        let t = try await alice.expect("bob typing") { $0.type == "typing" }
        #expect(t.user == "bob" && t.isTyping == true)
        try await carol.waitForLine("python sees typing") { $0.contains(#""type":"typing""#) && $0.contains(#""isTyping":true"#) }

        // A second room on the same connection, with another name; bob is not in it.
        try await alice.send(.join(room: "random", user: "al"))
        #expect(try await alice.expect("presence random") { $0.type == "presence" && $0.room == "random" }.users == ["al"])
        try await alice.send(.message(room: "random", text: "only random"))
        try await alice.expect("random echo") { $0.text == "only random" && $0.user == "al" }

        // Leave: the room and the leaver are told.
        carol.write(#"{"type":"leave","room":"general"}"# + "\n")
        try await alice.expect("carol left") { $0.type == "leave" && $0.user == "carol" }
        try await carol.waitForLine("python leave ack") { $0.contains(#""type":"leave""#) }

        // A late joiner gets presence and history (oldest first).
        let dave = try await TestPeer.connect("dave", url: server.wsURL)
        try await dave.send(.join(room: "general", user: "dave"))
        #expect(try await dave.expect("presence") { $0.type == "presence" }.users == ["alice", "bob", "dave"])
        let history = try await dave.expect("history") { $0.type == "history" }
        #expect(history.messages?.map(\.text) == ["hello all", "hi from python"])
        #expect(history.messages?.map(\.user) == ["alice", "carol"])

        // Disconnecting leaves every joined room.
        await bob.close()
        try await alice.expect("bob left on disconnect") { $0.type == "leave" && $0.user == "bob" }
        let bobEvents = await bob.events
        #expect(!bobEvents.contains { $0.type == "typing" }, "typing must not echo to the typist")
        #expect(!bobEvents.contains { $0.text == "only random" }, "other rooms must not leak")
        carol.closeStdin()
        #expect(await carol.waitForExit() == 0)
        #expect(await server.stop() == 0)
    }

    @Test func badInputGetsErrorsOnlyToTheSenderAndNeverDisconnects() async throws {
        let server = try await ChatServerProcess(db: try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite"))
        defer { server.child.signal(SIGKILL) }
        let alice = try await TestPeer.connect("alice", url: server.wsURL)
        let bob = try await TestPeer.connect("bob", url: server.wsURL)
        try await alice.send(.join(room: "g", user: "alice"))
        try await alice.expect("history") { $0.type == "history" }
        try await bob.send(.join(room: "g", user: "bob"))
        try await bob.expect("history") { $0.type == "history" }

        let cases: [(String, String, String)] = [
            ("this is not json", "invalid_json", "invalid_request_error"),
            (#"["array"]"#, "invalid_json", "invalid_request_error"),
            (#"{"type":"shout","room":"g"}"#, "unknown_type", "invalid_request_error"),
            (#"{"room":"g","text":"no type"}"#, "missing_field", "invalid_request_error"),
            (#"{"type":"message","room":"g"}"#, "missing_field", "invalid_request_error"),
            (#"{"type":"message","room":5,"text":"x"}"#, "invalid_field", "invalid_request_error"),
            (#"{"type":"typing","room":"g","isTyping":"yes"}"#, "invalid_field", "invalid_request_error"),
            (#"{"type":"message","room":"elsewhere","text":"x"}"#, "not_joined", "state_error"),
            (#"{"type":"typing","room":"elsewhere","isTyping":true}"#, "not_joined", "state_error"),
            (#"{"type":"leave","room":"elsewhere"}"#, "not_joined", "state_error"),
            (#"{"type":"message","room":"g","text":"   "}"#, "empty_text", "invalid_request_error"),
            (#"{"type":"message","room":"g","text":"\#(String(repeating: "x", count: 2001))"}"#, "text_too_long", "invalid_request_error"),
            (#"{"type":"join","room":"g","user":"alice-again"}"#, "already_joined", "state_error"),
            (#"{"type":"join","room":"","user":"a"}"#, "invalid_room", "invalid_request_error"),
            (#"{"type":"join","room":"\#(String(repeating: "r", count: 65))","user":"a"}"#, "invalid_room", "invalid_request_error"),
            (#"{"type":"join","room":"h","user":""}"#, "invalid_user", "invalid_request_error"),
            (#"{"type":"join","room":"h","user":"\#(String(repeating: "u", count: 65))"}"#, "invalid_user", "invalid_request_error"),
        ]
        for (line, code, type) in cases {
            try await alice.sendRaw(line + "\n")
            let e = try await alice.expectError(code: code, type: type)
            #expect(!(e.error?.message.isEmpty ?? true))
        }
        // Name taken, case-insensitively, by another connection.
        let eve = try await TestPeer.connect("eve", url: server.wsURL)
        try await eve.send(.join(room: "g", user: "ALICE"))
        _ = try await eve.expectError(code: "name_taken", type: "conflict_error")
        // …and eve can still join with a free name.
        try await eve.send(.join(room: "g", user: "eve"))
        #expect(try await eve.expect("presence") { $0.type == "presence" }.users == ["alice", "bob", "eve"])

        // Still connected and working after all that.
        try await alice.send(.message(room: "g", text: "still here"))
        try await bob.expect("valid message after bad input") { $0.text == "still here" }
        let bobEvents = await bob.events
        #expect(!bobEvents.contains { $0.type == "error" }, "errors must go to the sender only: \(bobEvents)")
        #expect(bobEvents.filter { $0.type == "message" }.map(\.text) == ["still here"], "bad input reached others: \(bobEvents)")
        #expect(!bobEvents.contains { $0.type == "join" && $0.user?.lowercased() == "alice" && $0.room != "g" })
        #expect(await server.stop() == 0)
    }

    /// `--max-rooms-per-connection 3`: a fourth join (with or without `since`) gets
    /// `too_many_rooms` and subscribes nothing; after a `leave` the join works.
    @Test func joinsBeyondTheRoomCapGetTooManyRoomsAndSubscribeNothing() async throws {
        let server = try await ChatServerProcess(db: try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite"),
                                                 extraArguments: ["--max-rooms-per-connection", "3"])
        defer { server.child.signal(SIGKILL) }
        let alice = try await TestPeer.connect("alice", url: server.wsURL)
        for room in ["r0", "r1", "r2"] {
            try await alice.send(.join(room: room, user: "alice"))
            try await alice.expect("history of \(room)") { $0.type == "history" && $0.room == room }
        }
        try await alice.send(.join(room: "r3", user: "alice"))
        let e = try await alice.expectError(code: "too_many_rooms", type: "state_error")
        #expect(e.error?.message.contains("3") == true, "\(e)")
        try await alice.send(.join(room: "r3", user: "alice", since: 0))
        try await alice.expectError(code: "too_many_rooms", type: "state_error")

        // alice is not in r3: bob is alone there, and what he says in it does not reach her.
        let bob = try await TestPeer.connect("bob", url: server.wsURL)
        try await bob.send(.join(room: "r3", user: "bob"))
        #expect(try await bob.expect("bob's presence in r3") { $0.type == "presence" }.users == ["bob"])
        try await bob.send(.join(room: "r0", user: "bob"))
        try await bob.expect("bob's history in r0") { $0.type == "history" && $0.room == "r0" }
        try await bob.send(.message(room: "r3", text: "in r3"))
        try await bob.send(.message(room: "r0", text: "in r0, after"))
        try await alice.expect("bob's message in r0") { $0.text == "in r0, after" }
        let aliceEvents = await alice.events
        #expect(!aliceEvents.contains { $0.room == "r3" && $0.type != "error" }, "\(aliceEvents)")

        // One room left: one more can be joined.
        try await alice.send(.leave(room: "r1"))
        try await alice.expect("the leave of r1") { $0.type == "leave" && $0.room == "r1" }
        try await alice.send(.join(room: "r3", user: "alice"))
        #expect(try await alice.expect("presence in r3") { $0.type == "presence" && $0.room == "r3" }.users == ["bob", "alice"])
        #expect(await server.stop() == 0)
    }

    /// By default a connection may be in 100 rooms: the 101st join of a burst is refused.
    @Test func theDefaultRoomCapIs100() async throws {
        let server = try await ChatServerProcess(db: try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite"),
                                                 extraArguments: ["--rate", "10000", "--burst", "10000"])
        defer { server.child.signal(SIGKILL) }
        let alice = try await TestPeer.connect("alice", url: server.wsURL)
        try await alice.sendRaw((0..<105).map { ChatCommand.join(room: "r\($0)", user: "alice").line }.joined())
        try await alice.expect("the last history") { $0.type == "history" && $0.room == "r99" }
        for i in 100..<105 {
            let e = try await alice.expectError(code: "too_many_rooms", type: "state_error")
            #expect(e.error?.message.contains("100") == true, "join \(i): \(e)")
        }
        try await alice.send(.message(room: "r0", text: "barrier"))
        try await alice.expect("the barrier") { $0.text == "barrier" }
        let events = await alice.events
        #expect(events.filter { $0.type == "presence" }.count == 100)
        #expect(events.filter { $0.error?.code == "too_many_rooms" }.count == 5)
        #expect(!events.contains { $0.type == "presence" && ["r100", "r104"].contains($0.room) })
        #expect(await server.stop() == 0)
    }

    /// Waits until `peer` has answered `count` lines with an echo or a `rate_limited` error (or
    /// 120 s have passed: a failure guard only).
    private func answers(of peer: TestPeer, reaching count: Int) async throws -> (echoed: Int, refused: Int) {
        var echoed = 0, refused = 0
        let deadline = ContinuousClock.now + .seconds(120)
        while ContinuousClock.now < deadline {
            let events = await peer.events
            echoed = events.filter { $0.type == "message" && $0.user == peer.name }.count
            refused = events.filter { $0.error?.code == "rate_limited" }.count
            if echoed + refused >= count { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        return (echoed, refused)
    }

    @Test func rateLimitDropsLinesOverTheBucketWithRetryAfter() async throws {
        // A bucket of 40 that refills one token per 1000 s: how many lines pass does not depend on
        // how fast this build processes them (ThreadSanitizer is 10× slower), so the counts are exact.
        let server = try await ChatServerProcess(db: try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite"),
                                                 extraArguments: ["--rate", "0.001", "--burst", "40"])
        defer { server.child.signal(SIGKILL) }
        let alice = try await TestPeer.connect("alice", url: server.wsURL)
        let bob = try await TestPeer.connect("bob", url: server.wsURL)
        try await alice.send(.join(room: "r", user: "alice"))
        try await alice.expect("history") { $0.type == "history" }
        try await bob.send(.join(room: "r", user: "bob"))
        try await bob.expect("history") { $0.type == "history" }

        // 60 lines in one write; the join took one token, so 39 pass and 21 are refused.
        let burst = (0..<60).map { ChatCommand.message(room: "r", text: "m\($0)").line }.joined()
        try await alice.sendRaw(burst)
        let limited = try await alice.expectError(code: "rate_limited", type: "rate_limit_error")
        #expect(limited.error?.message == "rate limit exceeded")
        let retryAfter = limited.error?.retry_after ?? 0
        #expect(retryAfter > 900 && retryAfter <= 1000, "one token per 1000 s: \(retryAfter)")
        // Every line gets exactly one answer: its echo or a rate-limit error.
        let (echoed, refused) = try await answers(of: alice, reaching: 60)
        #expect(echoed == 39)
        #expect(refused == 21)
        // The first 39 lines are the ones that passed, in order.
        let texts = await alice.events.filter { $0.type == "message" }.compactMap(\.text)
        #expect(texts == (0..<39).map { "m\($0)" })
        var bobSaw = 0
        let deadline = ContinuousClock.now + .seconds(120)      // a failure guard only
        while ContinuousClock.now < deadline {
            bobSaw = await bob.events.filter { $0.type == "message" }.count
            if bobSaw >= 39 { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(bobSaw == 39)
        // The bucket is per connection: bob still has his.
        try await bob.send(.message(room: "r", text: "from bob"))
        try await alice.expect("bob's message") { $0.text == "from bob" }
        #expect(await server.stop() == 0)
    }

    @Test func rateLimitedConnectionSendsAgainOnceTheBucketRefills() async throws {
        // One token, refilled every 200 ms. Whether the three back-to-back lines are refused depends on
        // the build's speed, so only "each gets one answer" is asserted about them; a line sent after
        // the refill time must pass.
        let server = try await ChatServerProcess(db: try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite"),
                                                 extraArguments: ["--rate", "5", "--burst", "1"])
        defer { server.child.signal(SIGKILL) }
        let alice = try await TestPeer.connect("alice", url: server.wsURL)
        try await alice.send(.join(room: "r", user: "alice"))
        try await alice.expect("history") { $0.type == "history" }
        let lines = (0..<3).map { ChatCommand.message(room: "r", text: "m\($0)").line }.joined()
        try await alice.sendRaw(lines)
        let (echoed, refused) = try await answers(of: alice, reaching: 3)
        #expect(echoed + refused == 3)
        // More than one refill period since the last answer, so at least since the server took
        // its last token: a wait in the direction that cannot flake (later is only fuller).
        try await Task.sleep(for: .milliseconds(250))
        try await alice.send(.message(room: "r", text: "after the pause"))
        try await alice.expect("message after the pause") { $0.text == "after the pause" }
        #expect(await server.stop() == 0)
    }

    @Test func restartWithTheSameDatabaseKeepsHistoryAndClientsGet1001() async throws {
        let db = try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite")
        let first = try await ChatServerProcess(db: db)
        defer { first.child.signal(SIGKILL) }
        let alice = try await TestPeer.connect("alice", url: first.wsURL)
        try await alice.send(.join(room: "h", user: "alice"))
        for text in ["before restart 1", "before restart 2"] {
            try await alice.send(.message(room: "h", text: text))
            try await alice.expect("echo") { $0.text == text }
        }
        // The terminal client too (without reconnection): on a server close it says so and exits 1.
        let terminal = try ChildProcess(executable: try ChatPaths.binary(),
                                        arguments: ["join", "--url", first.wsURL, "--room", "h", "--user", "term",
                                                    "--no-reconnect"])
        defer { terminal.signal(SIGKILL) }
        try await terminal.waitForLine("terminal presence") { $0 == "[h] users: alice, term" }

        // SIGTERM: the server's ServiceGroup shuts down gracefully: every client gets 1001,
        // `run()` returns (the process says so after the group returned) and it exits 0.
        #expect(await first.stop() == 0)
        #expect(try await alice.waitForClose() == 1001)
        try await first.child.waitForLine("the stopped line") { $0 == "chat-room stopped" }
        let closedLine = try await terminal.waitForLine("terminal close notice") { $0.hasPrefix("connection closed (") }
        #expect(closedLine.hasPrefix("connection closed (1001"))
        #expect(await terminal.waitForExit() == 1)

        let second = try await ChatServerProcess(db: db)
        defer { second.child.signal(SIGKILL) }
        let bob = try await TestPeer.connect("bob", url: second.wsURL)
        try await bob.send(.join(room: "h", user: "bob"))
        let history = try await bob.expect("history after restart") { $0.type == "history" }
        #expect(history.messages?.map(\.text) == ["before restart 1", "before restart 2"])
        #expect(history.messages?.allSatisfy { $0.user == "alice" && $0.room == "h" && ($0.ts ?? 0) > 0 } == true)
        #expect(await second.stop() == 0)
    }

    @Test func terminalClientReconnectsAndRejoinsAfterARestart() async throws {
        let db = try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite")
        let first = try await ChatServerProcess(db: db)
        defer { first.child.signal(SIGKILL) }
        let port = first.port
        let terminal = try ChildProcess(executable: try ChatPaths.binary(),
                                        arguments: ["join", "--url", first.wsURL, "--room", "h", "--user", "term"])
        defer { terminal.signal(SIGKILL) }
        try await terminal.waitForLine("terminal presence") { $0 == "[h] users: term" }
        #expect(await first.stop() == 0)
        _ = try await terminal.waitForLine("reconnecting notice") { $0.hasPrefix("* connection lost; reconnecting") }

        let second = try await ChatServerProcess(db: db, extraArguments: ["--port", "\(port)"])
        defer { second.child.signal(SIGKILL) }
        #expect(second.port == port)
        _ = try await terminal.waitForLine("reconnected notice") { $0 == "* reconnected" }
        // "* reconnected" comes when the socket is open; the re-join is a command after it.
        // Its presence answer says the server has handled it (waiting for it removes a race
        // with bob's join below) — the one after the notice: the first server's, before the
        // restart, is the same line (a ThreadSanitizer run saw bob alone in the room).
        let reconnected = try #require(terminal.lines.firstIndex(of: "* reconnected"))
        _ = try await terminal.waitForLine(from: reconnected + 1, "presence after re-join") { $0 == "[h] users: term" }
        // The client joined "h" again by itself: a newcomer sees it in the presence list.
        let bob = try await TestPeer.connect("bob", url: second.wsURL)
        try await bob.send(.join(room: "h", user: "bob"))
        let presence = try await bob.expect("presence") { $0.type == "presence" }
        #expect(presence.users?.sorted() == ["bob", "term"])
        try await bob.send(.message(room: "h", text: "welcome back"))
        _ = try await terminal.waitForLine("message after reconnect") { $0 == "[h] bob: welcome back" }
        #expect(await second.stop() == 0)
    }

    @Test func servesThePageAndRequiresTheTokenWhenConfigured() async throws {
        let server = try await ChatServerProcess(db: try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite"),
                                                 extraArguments: ["--token", "s3cret"])
        defer { server.child.signal(SIGKILL) }
        let (body, response) = try await URLSession.shared.data(from: URL(string: server.httpURL)!)
        let http = try #require(response as? HTTPURLResponse)
        #expect(http.statusCode == 200)
        #expect((http.value(forHTTPHeaderField: "Content-Type") ?? "").hasPrefix("text/html"))
        let html = String(decoding: body, as: UTF8.self)
        #expect(html.contains("new WebSocket(") && html.contains("/v1/ws"))
        for id in ["room", "user", "join", "messages", "presence", "typing", "text", "send"] {
            #expect(html.contains(#"id="\#(id)""#), "missing #\(id)")
        }
        let (_, missing) = try await URLSession.shared.data(from: URL(string: server.httpURL + "nope")!)
        #expect((missing as? HTTPURLResponse)?.statusCode == 404)

        // No token, wrong token: 401 with the JSON error body.
        for url in [server.wsURL, server.wsURL + "?token=wrong"] {
            do {
                _ = try await TestPeer.connect("anon", url: url)
                Issue.record("connected without the right token: \(url)")
            } catch let e as SwitchboardError {
                #expect(e.kind == .handshakeRejected && e.httpStatus == 401)
                #expect(e.httpBody?.contains(#""type":"authentication_error""#) == true)
            }
        }
        // Header and query token both work.
        let viaHeader = try await TestPeer.connect("h", url: server.wsURL, token: "s3cret")
        try await viaHeader.send(.join(room: "t", user: "h"))
        try await viaHeader.expect("presence") { $0.type == "presence" }
        let viaQuery = try await TestPeer.connect("q", url: server.wsURL + "?token=s3cret")
        try await viaQuery.send(.join(room: "t", user: "q"))
        #expect(try await viaQuery.expect("presence") { $0.type == "presence" }.users == ["h", "q"])
        #expect(await server.stop() == 0)
    }
}
