import Foundation
import ChatRoomCore
import SwitchboardTestSupport
import Testing

/// The `history` command's parsing (pure): defaults, bounds and the errors of bad values.
@Suite struct HistoryCommandParsingTests {
    func parse(_ s: String) -> Result<ClientCommand, ChatError> { ChatValidation.parse(Data(s.utf8)) }

    @Test func historyTakesDefaultsAndBounds() {
        #expect(parse(#"{"type":"history","room":"r"}"#)
                == .success(.history(room: "r", before: nil, limit: ChatLimits.defaultHistoryPageSize)))
        #expect(parse(#"{"type":"history","room":" r ","before":null,"limit":null}"#)
                == .success(.history(room: "r", before: nil, limit: 50)))
        #expect(parse(#"{"type":"history","room":"r","before":1,"limit":1}"#) == .success(.history(room: "r", before: 1, limit: 1)))
        #expect(parse(#"{"type":"history","room":"r","before":9007199254740992,"limit":200}"#)
                == .success(.history(room: "r", before: ChatLimits.maxMessageID, limit: ChatLimits.maxHistoryPageSize)))
    }

    @Test(arguments: [
        #"{"type":"history","room":"r","before":0}"#, #"{"type":"history","room":"r","before":-5}"#,
        #"{"type":"history","room":"r","before":1.5}"#, #"{"type":"history","room":"r","before":"12"}"#,
        #"{"type":"history","room":"r","before":true}"#, #"{"type":"history","room":"r","before":9007199254740994}"#,
        #"{"type":"history","room":"r","before":1e300}"#,
    ])
    func badBeforeIsRefused(line: String) throws {
        let error = try #require(parse(line).failure)
        #expect(error.code == "invalid_field")
        #expect(error.type == "invalid_request_error")
        #expect(error.message.contains("'before'"))
    }

    @Test(arguments: [
        #"{"type":"history","room":"r","limit":0}"#, #"{"type":"history","room":"r","limit":201}"#,
        #"{"type":"history","room":"r","limit":-1}"#, #"{"type":"history","room":"r","limit":2.5}"#,
        #"{"type":"history","room":"r","limit":"50"}"#, #"{"type":"history","room":"r","limit":[50]}"#,
    ])
    func badLimitIsRefused(line: String) throws {
        let error = try #require(parse(line).failure)
        #expect(error.code == "invalid_field")
        #expect(error.message.contains("'limit'") && error.message.contains("200"))
    }

    @Test func historyNeedsAValidRoom() {
        #expect(parse(#"{"type":"history"}"#).failure?.code == "missing_field")
        #expect(parse(#"{"type":"history","room":"  "}"#).failure?.code == "invalid_room")
        #expect(parse(#"{"type":"history","room":7}"#).failure?.code == "invalid_field")
    }

    @Test func chatCommandHistoryRoundTrips() throws {
        for command in [ChatCommand.history(room: "r"), .history(room: "r", before: 42), .history(room: "r", before: 7, limit: 200)] {
            let data = try JSONEncoder().encode(command)
            guard case .success(.history(let room, let before, let limit)) = ChatValidation.parse(data),
                  case .history(let r, let b, let l) = command else {
                Issue.record("\(command) did not parse back"); continue
            }
            #expect(room == r && before == b && limit == (l ?? ChatLimits.defaultHistoryPageSize))
        }
    }

    @Test func messageCarriesAnOptionalClientID() {
        #expect(parse(#"{"type":"message","room":"r","text":"t","client_id":"abc-1"}"#)
                == .success(.message(room: "r", text: "t", clientID: "abc-1")))
        #expect(parse(#"{"type":"message","room":"r","text":"t","client_id":null}"#) == .success(.message(room: "r", text: "t")))
        for bad in [#""""#, "5", "true", "\"" + String(repeating: "x", count: 65) + "\"", #""a\u0007""#] {
            let line = #"{"type":"message","room":"r","text":"t","client_id":"# + bad + "}"
            #expect(parse(line).failure?.code == "invalid_field", "\(line) accepted")
        }
        let encoded = ChatCommand.message(room: "r", text: "t", clientID: "c").message
        #expect(encoded == #"{"client_id":"c","room":"r","text":"t","type":"message"}"#
                || ChatValidation.parse(Data(encoded.utf8)) == .success(.message(room: "r", text: "t", clientID: "c")))
    }

    @Test func clientIDsAreBounded() {
        #expect((try? ChatValidation.validClientID("a")) == "a")
        #expect((try? ChatValidation.validClientID(String(repeating: "x", count: 64))) != nil)
        #expect((try? ChatValidation.validClientID("")) == nil)
        #expect((try? ChatValidation.validClientID(String(repeating: "x", count: 65))) == nil)
        #expect((try? ChatValidation.validClientID("a\u{0}b")) == nil)
        #expect((try? ChatValidation.validClientID("a\nb")) == nil)
        // 64 characters, but each of many scalars: bounded in bytes too.
        #expect((try? ChatValidation.validClientID(String(repeating: "e\u{301}\u{301}\u{301}\u{301}", count: 64))) == nil)
    }
}

extension Result {
    var failure: Failure? { if case .failure(let e) = self { e } else { nil } }
}

/// The `history` command against real servers: paging back through 2,000 messages on SQLite and
/// on Redis (`--redis-history 5000`), the stream's length on Redis, and its errors. Serialized:
/// each test runs a server (and a Redis) and sends thousands of lines.
@Suite(.serialized, .timeLimit(.minutes(10)))
struct ChatHistoryTests {
    /// `next` and the messages of a `history` line (TestPeer's ``Event`` has no `next`).
    struct Page: Decodable {
        var messages: [Event]
        var next: Int64?
    }

    /// A server that lets one connection send thousands of lines at once.
    static let unthrottled = ["--rate", "1000000", "--burst", "1000000"]

    static func page(_ event: Event) throws -> Page {
        // `next` is always there in these answers, as null when nothing older is kept.
        #expect(event.raw.contains(#""next":"#), "no next in \(event.raw.prefix(200))")
        return try JSONDecoder().decode(Page.self, from: Data(event.raw.utf8))
    }

    /// Posts `count` messages into `room` through one connection and returns their ids (from the
    /// broadcast the sender gets back), oldest first.
    static func post(_ count: Int, into room: String, url: String, prefix: String = "m") async throws -> [Int64] {
        let writer = try await TestPeer.connect("writer", url: url)
        try await writer.send(.join(room: room, user: "writer"))
        try await writer.expect("history") { $0.type == "history" }
        for i in 0..<count { try await writer.send(.message(room: room, text: "\(prefix)\(i)")) }
        var ids: [Int64] = []
        for i in 0..<count {
            let text = "\(prefix)\(i)"
            let e = try await writer.expect(text, timeout: .seconds(300)) { $0.type == "message" && $0.text == text }
            ids.append(try #require(e.id))
        }
        await writer.close()
        #expect(ids == ids.sorted() && Set(ids).count == count, "ids not increasing")
        return ids
    }

    /// Joins `room` as a fresh client and pages back with `history` (`limit` per page) until
    /// `next` is null; returns every message seen, oldest first, and the number of pages.
    static func pageBack(room: String, url: String, limit: Int) async throws -> (messages: [Event], pages: Int) {
        let reader = try await TestPeer.connect("reader", url: url)
        defer { Task { await reader.close() } }
        try await reader.send(.join(room: room, user: "reader"))
        var first = try page(try await reader.expect("join history") { $0.type == "history" })
        var all = first.messages
        var pages = 0
        while let before = first.next {
            #expect(before == all.first?.id, "next is not the oldest id shown")
            try await reader.send(.history(room: room, before: before, limit: limit))
            first = try page(try await reader.expect("page before \(before)", timeout: .seconds(120)) { $0.type == "history" })
            #expect(first.messages.count <= limit)
            #expect(first.messages.allSatisfy { ($0.id ?? .max) < before }, "a page holds a message at or above its before")
            all = first.messages + all
            pages += 1
            if pages > 10_000 { throw TestFailure("paging does not end") }
        }
        return (all, pages)
    }

    static func checkPagedBack(_ ids: [Int64], url: String, room: String, prefix: String = "m") async throws {
        let (messages, pages) = try await pageBack(room: room, url: url, limit: 200)
        // 50 in the join's history, then 1,950 in pages of 200: 10 pages.
        #expect(pages == (ids.count - ChatLimits.historyCount + 199) / 200)
        #expect(messages.compactMap(\.id) == ids, "gap, duplicate or disorder")
        #expect(messages.map { $0.text ?? "" } == ids.indices.map { "\(prefix)\($0)" })
        #expect(messages.allSatisfy { $0.user == "writer" && $0.room == room && ($0.ts ?? 0) > 0 })
    }

    @Test func pagesBackThrough2000MessagesOnSQLite() async throws {
        let db = try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite")
        let server = try await ChatServerProcess(db: db, extraArguments: Self.unthrottled)
        defer { server.child.signal(SIGKILL) }
        let ids = try await Self.post(2000, into: "long", url: server.wsURL)
        // Another room's messages never show up in this one's pages.
        _ = try await Self.post(30, into: "other", url: server.wsURL, prefix: "o")
        try await Self.checkPagedBack(ids, url: server.wsURL, room: "long")
        #expect(await server.stop() == 0)
    }

    @Test func pagesBackThrough2000MessagesOnRedisWithLongerStreams() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }
        let nodes = try await RedisScaleOutTests.startNodes(1, redis: redis,
                                                            extraArguments: Self.unthrottled + ["--redis-history", "5000"])
        defer { for node in nodes { node.child.signal(SIGKILL) } }
        let ids = try await Self.post(2000, into: "long", url: nodes[0].wsURL)
        _ = try await Self.post(30, into: "other", url: nodes[0].wsURL, prefix: "o")
        try await Self.checkPagedBack(ids, url: nodes[0].wsURL, room: "long")
        #expect(try redis.command("XLEN", "switchboard:chat:room:long:history").trimmingCharacters(in: .whitespacesAndNewlines) == "2000")
    }

    /// `--redis-history 100`: the stream keeps the newest 100; paging back ends there.
    @Test func redisHistoryBoundsWhatPagesReach() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }
        let nodes = try await RedisScaleOutTests.startNodes(1, redis: redis,
                                                            extraArguments: Self.unthrottled + ["--redis-history", "100"])
        defer { for node in nodes { node.child.signal(SIGKILL) } }
        let ids = try await Self.post(150, into: "short", url: nodes[0].wsURL)
        let (messages, pages) = try await Self.pageBack(room: "short", url: nodes[0].wsURL, limit: 30)
        #expect(messages.compactMap(\.id) == Array(ids.suffix(100)))
        #expect(pages == 2)  // 50 with the join, then 30 and 20
        #expect(try redis.command("XLEN", "switchboard:chat:room:short:history").trimmingCharacters(in: .whitespacesAndNewlines) == "100")
    }

    @Test func redisHistoryOutOfRangeIsRefusedAtStart() async throws {
        for value in ["0", "1000001", "x"] {
            let child = try ChildProcess(executable: try ChatPaths.binary(),
                                         arguments: ["serve", "--port", "0", "--redis", "redis://127.0.0.1:1", "--redis-history", value])
            #expect(await child.waitForExit() == 64, "--redis-history \(value) accepted")
            #expect(child.stderrText.contains("--redis-history"))
        }
    }

    @Test func historyErrorsAndEdges() async throws {
        let db = try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite")
        let server = try await ChatServerProcess(db: db, extraArguments: Self.unthrottled)
        defer { server.child.signal(SIGKILL) }
        let peer = try await TestPeer.connect("p", url: server.wsURL)

        // Not joined: refused, nothing read.
        try await peer.send(.history(room: "r"))
        let notJoined = try await peer.expectError(code: "not_joined", type: "state_error")
        #expect(notJoined.error?.message.contains("'r'") == true)

        try await peer.send(.join(room: "r", user: "p"))
        let empty = try Self.page(try await peer.expect("join history") { $0.type == "history" })
        #expect(empty.messages.isEmpty && empty.next == nil)

        // Bad values: clear errors on the open connection, which keeps working.
        try await peer.sendRaw(#"{"type":"history","room":"r","before":0}"# + "\n")
        #expect(try await peer.expectError(code: "invalid_field", type: "invalid_request_error").error?.message.contains("before") == true)
        try await peer.sendRaw(#"{"type":"history","room":"r","limit":201}"# + "\n")
        #expect(try await peer.expectError(code: "invalid_field", type: "invalid_request_error").error?.message.contains("limit") == true)

        for i in 0..<5 { try await peer.send(.message(room: "r", text: "t\(i)")) }
        var ids: [Int64] = []
        for i in 0..<5 {
            ids.append(try #require(try await peer.expect("t\(i)") { $0.type == "message" && $0.text == "t\(i)" }.id))
        }
        // Default limit, no before: the newest; everything fits, so next is null.
        try await peer.send(.history(room: "r"))
        let all = try Self.page(try await peer.expect("history") { $0.type == "history" })
        #expect(all.messages.compactMap(\.id) == ids && all.next == nil)
        // Two below the fourth: the second and the third, and more before them.
        try await peer.send(.history(room: "r", before: ids[3], limit: 2))
        let middle = try Self.page(try await peer.expect("history") { $0.type == "history" })
        #expect(middle.messages.compactMap(\.id) == [ids[1], ids[2]])
        #expect(middle.next == ids[1])
        // Below the oldest: empty, null.
        try await peer.send(.history(room: "r", before: ids[0], limit: 10))
        let none = try Self.page(try await peer.expect("history") { $0.type == "history" })
        #expect(none.messages.isEmpty && none.next == nil)
        // A before far above every id: the newest.
        try await peer.send(.history(room: "r", before: ChatLimits.maxMessageID, limit: 1))
        let newest = try Self.page(try await peer.expect("history") { $0.type == "history" })
        #expect(newest.messages.compactMap(\.id) == [ids[4]] && newest.next == ids[4])

        // After leaving: refused again.
        try await peer.send(.leave(room: "r"))
        try await peer.send(.history(room: "r"))
        try await peer.expectError(code: "not_joined", type: "state_error")
        await peer.close()
        #expect(await server.stop() == 0)
    }

    /// A `message` sent again with the same `client_id` (a retry) is stored and broadcast once
    /// per room, on every node: the others, the history and a second node see it once; another
    /// room's same id is another message.
    static func checkClientIDRetries(first: String, second: String) async throws {
        let a = try await TestPeer.connect("a", url: first)
        let b = try await TestPeer.connect("b", url: second)
        for (peer, name) in [(a, "a"), (b, "b")] {
            try await peer.send(.join(room: "r", user: name))
            try await peer.expect("join history") { $0.type == "history" }
        }
        try await a.send(.message(room: "r", text: "once", clientID: "retry-1"))
        try await b.expect("once") { $0.type == "message" && $0.text == "once" }
        // Retries: the same id from the same client, and from another one through another node
        // (a retried HTTP request may reach any process); the text of a retry is not used.
        try await a.send(.message(room: "r", text: "once", clientID: "retry-1"))
        try await b.send(.message(room: "r", text: "once again", clientID: "retry-1"))
        try await a.send(.message(room: "other", text: "x", clientID: "retry-1"))
        try await a.expectError(code: "not_joined", type: "state_error")
        try await a.send(.join(room: "other", user: "a"))
        try await a.expect("join history") { $0.type == "history" && $0.room == "other" }
        try await a.send(.message(room: "other", text: "same id, other room", clientID: "retry-1"))
        try await a.expect("other room") { $0.type == "message" && $0.text == "same id, other room" }
        // A later message: delivered in order, so every copy of the retries came before it.
        try await a.send(.message(room: "r", text: "after", clientID: "retry-2"))
        for peer in [a, b] {
            try await peer.expect("after") { $0.type == "message" && $0.text == "after" }
            let copies = await peer.events.filter { $0.type == "message" && $0.room == "r" && $0.text?.hasPrefix("once") == true }
            #expect(copies.count == 1, "\(peer.name) got \(copies.map(\.description))")
        }
        try await b.send(.history(room: "r"))
        let page = try page(try await b.expect("history") { $0.type == "history" && $0.raw.contains(#""next""#) })
        #expect(page.messages.map { $0.text ?? "" } == ["once", "after"])
        await a.close()
        await b.close()
    }

    @Test func clientIDRetryIsStoredOnceOnSQLite() async throws {
        let db = try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite")
        let server = try await ChatServerProcess(db: db, extraArguments: Self.unthrottled)
        defer { server.child.signal(SIGKILL) }
        try await Self.checkClientIDRetries(first: server.wsURL, second: server.wsURL)
        #expect(await server.stop() == 0)
    }

    @Test func clientIDRetryIsStoredOnceAcrossRedisNodes() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }
        let nodes = try await RedisScaleOutTests.startNodes(2, redis: redis, extraArguments: Self.unthrottled)
        defer { for node in nodes { node.child.signal(SIGKILL) } }
        try await Self.checkClientIDRetries(first: nodes[0].wsURL, second: nodes[1].wsURL)
        // The key holds "id ts" and expires with the window.
        let key = "switchboard:chat:room:r:client:" + "retry-1".utf8.map { String(format: "%02x", $0) }.joined()
        let ttl = Int(try redis.command("TTL", key).trimmingCharacters(in: .whitespacesAndNewlines)) ?? -2
        #expect((1...600).contains(ttl), "TTL \(ttl)")
        #expect(try redis.command("GET", key).range(of: #"^\d+ \d+\s*$"#, options: .regularExpression) != nil)
    }

    /// Texts of 2,000 characters can be large (combining marks): a page stops before the
    /// message that would pass 768 KiB of text, and `next` continues from there, no gap.
    @Test func largeMessagesMakeShorterPages() async throws {
        let db = try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite")
        let server = try await ChatServerProcess(db: db, extraArguments: Self.unthrottled)
        defer { server.child.signal(SIGKILL) }
        // 1,000 characters of 301 UTF-8 bytes each: two fit in a page, three do not.
        let big = String(repeating: "e" + String(repeating: "\u{301}", count: 150), count: 1000)
        #expect(big.count == 1000 && big.utf8.count == 301_000)
        let writer = try await TestPeer.connect("writer", url: server.wsURL)
        try await writer.send(.join(room: "big", user: "writer"))
        try await writer.expect("join history") { $0.type == "history" }
        var ids: [Int64] = []
        for i in 0..<5 {
            try await writer.send(.message(room: "big", text: "\(i)|" + big))
            ids.append(try #require(try await writer.expect("big \(i)") { $0.type == "message" && $0.text?.hasPrefix("\(i)|") == true }.id))
        }
        let (messages, pages) = try await Self.pageBack(room: "big", url: server.wsURL, limit: 200)
        #expect(messages.compactMap(\.id) == ids)
        #expect(pages == 2)  // [3, 4] with the join, then [1, 2], then [0]
        await writer.close()
        #expect(await server.stop() == 0)
    }

    /// The command goes through the connection's rate limit like every other line.
    @Test func historyIsRateLimited() async throws {
        let db = try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite")
        let server = try await ChatServerProcess(db: db, extraArguments: ["--rate", "0.01", "--burst", "3"])
        defer { server.child.signal(SIGKILL) }
        let peer = try await TestPeer.connect("p", url: server.wsURL)
        try await peer.send(.join(room: "r", user: "p"))
        try await peer.expect("join history") { $0.type == "history" }
        for _ in 0..<4 { try await peer.send(.history(room: "r")) }
        try await peer.expectError(code: "rate_limited", type: "rate_limit_error")
        // Two answered (the join took the first token), the rest limited.
        try await peer.expect("a paged history") { $0.type == "history" }
        try await peer.expect("a paged history") { $0.type == "history" }
        await peer.close()
    }
}
