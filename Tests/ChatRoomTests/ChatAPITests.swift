import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Switchboard
import SwitchboardCore
import SwitchboardTestSupport
import ChatRoomCore
import Testing

/// The chat-room's backend HTTP API (docs/chat-protocol.md "HTTP API") against the built
/// binary: Python's urllib posts, a WebSocket client on another node (same Redis) receives;
/// history pages back over HTTP on SQLite and on Redis; redis-py publishes with the documented
/// envelope. Serialized: each test runs servers (and a Redis).
@Suite(.serialized, .timeLimit(.minutes(10)))
struct ChatAPITests {
    /// Sends `count` messages `"<prefix> i"` (i = 1…count) to `room` through `peer` (joined) and
    /// waits for the last one's echo: all of them are stored then.
    static func fill(_ peer: TestPeer, room: String, count: Int, prefix: String) async throws {
        for i in 1...count {
            try await peer.send(.message(room: room, text: "\(prefix) \(i)"))
        }
        try await peer.expect("the last message's echo", timeout: .seconds(120)) {
            $0.type == "message" && $0.text == "\(prefix) \(count)"
        }
    }

    @Test func postThroughOneNodeReachesAWebSocketClientOnAnotherOnce() async throws {
        try await Python.require(module: "urllib.request", hint: "python3's standard library")
        let dir = try ChatPaths.tempDirectory()
        let (keyPath, key) = try APIClients.keyFile(in: dir)
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }
        let nodes = try await RedisScaleOutTests.startNodes(2, redis: redis, extraArguments: ["--api-key-file", keyPath])
        defer { for node in nodes { node.child.signal(SIGKILL) } }
        let (a, b) = (nodes[0], nodes[1])

        let bob = try await TestPeer.connect("bob", url: b.wsURL)
        try await bob.send(.join(room: "ops room", user: "bob"))
        try await bob.expect("history") { $0.type == "history" }

        // urllib POSTs to node A; the room's name is percent-encoded in the path.
        let url = "\(a.httpURL)v1/rooms/ops%20room/messages"
        let body = #"{"user":"deploy-bot","text":"release 1.2 is out","client_id":"deploy-42"}"#
        let first = try await APIClients.python("POST", url, key: key, body: body)
        #expect(first.status == 200, "\(first)")
        let id = try #require((first.json["id"] as? NSNumber)?.int64Value)
        let ts = try #require((first.json["ts"] as? NSNumber)?.int64Value)
        #expect(ts > 1_600_000_000_000)
        let received = try await bob.expect("the posted message, through node B") {
            $0.type == "message" && $0.text == "release 1.2 is out"
        }
        #expect(received.id == id && received.user == "deploy-bot" && received.room == "ops room" && received.ts == ts)

        // The retry (same client_id) answers the same message, stores and delivers nothing new.
        let retry = try await APIClients.python("POST", url, key: key, body: body)
        #expect(retry.status == 200)
        #expect((retry.json["id"] as? NSNumber)?.int64Value == id && (retry.json["ts"] as? NSNumber)?.int64Value == ts)
        // A later message proves delivery caught up (in order): the first arrived once.
        let after = try await APIClients.python("POST", "\(b.httpURL)v1/rooms/ops%20room/messages", key: key,
                                                body: #"{"user":"deploy-bot","text":"marker"}"#)
        #expect(after.status == 200)
        try await bob.expect("the marker") { $0.type == "message" && $0.text == "marker" }
        #expect(await bob.events.filter { $0.type == "message" && $0.text == "release 1.2 is out" }.count == 1)
        let page = try await APIClients.get("\(b.httpURL)v1/rooms/ops%20room/messages", key: key)
        let texts = (page.json["messages"] as? [[String: Any]])?.compactMap { $0["text"] as? String }
        #expect(page.status == 200 && texts == ["release 1.2 is out", "marker"], "\(page.json)")
        #expect(page.json["next"] is NSNull)

        // No key, a wrong key: 401 with the JSON error body. 17 KiB: 413 from the library.
        let noKey = try await APIClients.python("POST", url, body: body)
        #expect(noKey.status == 401 && noKey.errorType == "authentication_error", "\(noKey)")
        let wrongKey = try await APIClients.python("POST", url, key: key + "x", body: body)
        #expect(wrongKey.status == 401 && wrongKey.errorCode == "invalid_api_key", "\(wrongKey)")
        let tooLarge = try await APIClients.python("POST", url, key: key, bodySize: 17 * 1024)
        #expect(tooLarge.status == 413 && tooLarge.errorCode == "body_too_large", "\(tooLarge)")
        // Nothing of those was stored.
        let again = try await APIClients.get("\(a.httpURL)v1/rooms/ops%20room/messages", key: key)
        #expect((again.json["messages"] as? [Any])?.count == 2)
    }

    @Test func everyFailureHasTheJSONErrorBody() async throws {
        let dir = try ChatPaths.tempDirectory()
        let (keyPath, key) = try APIClients.keyFile(in: dir)
        let server = try await ChatServerProcess(db: dir.appendingPathComponent("chat.sqlite"),
                                                 extraArguments: ["--api-key-file", keyPath])
        defer { server.child.signal(SIGKILL) }
        let messages = "\(server.httpURL)v1/rooms/lobby/messages"
        let cases: [(method: String, url: String, body: String?, status: Int, code: String)] = [
            ("POST", messages, "not json", 400, "invalid_json"),
            ("POST", messages, "[1]", 400, "invalid_json"),
            ("POST", messages, #"{"text":"hi"}"#, 400, "missing_field"),
            ("POST", messages, #"{"user":"  ","text":"hi"}"#, 400, "invalid_user"),
            ("POST", messages, #"{"user":"u","text":"   "}"#, 400, "empty_text"),
            ("POST", messages, #"{"user":"u","text":"\#(String(repeating: "x", count: 2001))"}"#, 400, "text_too_long"),
            ("POST", messages, #"{"user":"u","text":"hi","client_id":""}"#, 400, "invalid_field"),
            ("POST", messages, #"{"user":"u","text":"hi","client_id":7}"#, 400, "invalid_field"),
            ("POST", "\(server.httpURL)v1/rooms/%E2%28/messages", #"{"user":"u","text":"hi"}"#, 400, "invalid_room"),
            ("GET", "\(messages)?limit=0", nil, 400, "invalid_field"),
            ("GET", "\(messages)?limit=201", nil, 400, "invalid_field"),
            ("GET", "\(messages)?before=abc", nil, 400, "invalid_field"),
            ("GET", "\(messages)?before=-3", nil, 400, "invalid_field"),
            ("GET", "\(messages)?limit=5&limit=6", nil, 400, "invalid_field"),
            ("DELETE", messages, nil, 405, "method_not_allowed"),
            ("GET", "\(server.httpURL)v1/rooms/lobby/nothing", nil, 404, "not_found"),
        ]
        for c in cases {
            let answer = try await APIClients.python(c.method, c.url, key: key, body: c.body)
            #expect(answer.status == c.status && answer.errorCode == c.code,
                    "\(c.method) \(c.url) \(c.body ?? ""): \(answer)")
            #expect(answer.json["error"] is [String: Any] && answer.errorType != nil, "\(answer)")
        }
        // A POST without a length (urllib always sends one: a raw request): 411.
        let raw = try await RawHTTP.exchange(port: server.port,
            "POST /v1/rooms/lobby/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(key)\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        #expect(raw.status == 411 && raw.body.contains("length_required"), "\(raw.head) \(raw.body)")
        // The page and the health check are still there.
        #expect(try await APIClients.python("GET", server.httpURL).status == 200)
        #expect(try await APIClients.python("GET", "\(server.httpURL)healthz").status == 200)
    }

    @Test func aRetriedPostIsStoredOnceOnSQLite() async throws {
        let dir = try ChatPaths.tempDirectory()
        let (keyPath, key) = try APIClients.keyFile(in: dir)
        let server = try await ChatServerProcess(db: dir.appendingPathComponent("chat.sqlite"),
                                                 extraArguments: ["--api-key-file", keyPath])
        defer { server.child.signal(SIGKILL) }
        let alice = try await TestPeer.connect("alice", url: server.wsURL)
        try await alice.send(.join(room: "a", user: "alice"))
        try await alice.expect("history") { $0.type == "history" }
        let url = "\(server.httpURL)v1/rooms/a/messages"
        let body = #"{"user":"bot","text":"once","client_id":"c-1"}"#
        let first = try await APIClients.python("POST", url, key: key, body: body)
        // The retry answers the first message even with another text; another room's same id is new.
        let retry = try await APIClients.python("POST", url, key: key, body: #"{"user":"bot","text":"twice","client_id":"c-1"}"#)
        let otherRoom = try await APIClients.python("POST", "\(server.httpURL)v1/rooms/b/messages", key: key, body: body)
        #expect(first.status == 200 && retry.status == 200 && otherRoom.status == 200)
        let firstID = (first.json["id"] as? NSNumber)?.int64Value
        #expect(firstID != nil && (retry.json["id"] as? NSNumber)?.int64Value == firstID)
        #expect((otherRoom.json["id"] as? NSNumber)?.int64Value != firstID)
        let marker = try await APIClients.python("POST", url, key: key, body: #"{"user":"bot","text":"marker"}"#)
        #expect(marker.status == 200)
        try await alice.expect("the marker") { $0.type == "message" && $0.text == "marker" }
        let texts = await alice.events.filter { $0.type == "message" }.compactMap(\.text)
        #expect(texts == ["once", "marker"], "delivered once, the retry not at all: \(texts)")
        let page = try await APIClients.get(url, key: key)
        #expect((page.json["messages"] as? [[String: Any]])?.compactMap { $0["text"] as? String } == ["once", "marker"])
    }

    @Test func theAPIIsOffWithoutAKey() async throws {
        let dir = try ChatPaths.tempDirectory()
        let server = try await ChatServerProcess(db: dir.appendingPathComponent("chat.sqlite"))
        defer { server.child.signal(SIGKILL) }
        let post = try await APIClients.python("POST", "\(server.httpURL)v1/rooms/lobby/messages", key: "anything-at-all-0123",
                                               body: #"{"user":"u","text":"hi"}"#)
        #expect(post.status == 404 && post.errorType == "not_found_error", "\(post)")
        let get = try await APIClients.python("GET", "\(server.httpURL)v1/rooms/lobby/messages")
        #expect(get.status == 404, "\(get)")
    }

    @Test func aKeyFileTooShortIsRefusedAtStart() async throws {
        let dir = try ChatPaths.tempDirectory()
        let (keyPath, _) = try APIClients.keyFile(in: dir, key: "short-secret")
        let child = try ChildProcess(executable: try ChatPaths.binary(),
                                     arguments: ["serve", "--port", "0", "--db", ":memory:", "--api-key-file", keyPath])
        #expect(await child.waitForExit() == 64)
        #expect(child.stderrText.contains("--api-key-file") && !child.stderrText.contains("short-secret"), "\(child.stderrText)")
    }

    /// 2,000 messages, paged back with `limit` 137 (pages that do not divide the total) and 200.
    static func pageBackThrough2000(_ server: ChatServerProcess, key: String) async throws {
        let filler = try await TestPeer.connect("filler", url: server.wsURL)
        try await filler.send(.join(room: "archive", user: "filler"))
        try await filler.expect("history") { $0.type == "history" }
        try await fill(filler, room: "archive", count: 2000, prefix: "m")
        for limit in [137, 200] {
            let (ids, texts, pages) = try await APIClients.pageBack(server.httpURL, room: "archive", key: key, limit: limit)
            #expect(ids.count == 2000 && Set(ids).count == 2000, "limit \(limit): \(ids.count) ids")
            #expect(zip(ids, ids.dropFirst()).allSatisfy { $0 < $1 }, "limit \(limit): ids not increasing")
            #expect(texts == (1...2000).map { "m \($0)" }, "limit \(limit): a gap or a duplicate")
            #expect(pages == (2000 + limit - 1) / limit)
        }
    }

    @Test func historyPagesBackThrough2000MessagesOnSQLite() async throws {
        let dir = try ChatPaths.tempDirectory()
        let (keyPath, key) = try APIClients.keyFile(in: dir)
        let server = try await ChatServerProcess(db: dir.appendingPathComponent("chat.sqlite"),
                                                 extraArguments: ["--api-key-file", keyPath, "--rate", "100000", "--burst", "100000"])
        defer { server.child.signal(SIGKILL) }
        try await Self.pageBackThrough2000(server, key: key)
    }

    @Test func historyPagesBackThrough2000MessagesOnRedis() async throws {
        let dir = try ChatPaths.tempDirectory()
        let (keyPath, key) = try APIClients.keyFile(in: dir)
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }
        let nodes = try await RedisScaleOutTests.startNodes(1, redis: redis, extraArguments: [
            "--api-key-file", keyPath, "--rate", "100000", "--burst", "100000", "--redis-history", "5000"])
        defer { for node in nodes { node.child.signal(SIGKILL) } }
        try await Self.pageBackThrough2000(nodes[0], key: key)
    }

    @Test func aPythonProcessPublishesIntoARoomThroughRedis() async throws {
        try await Python.require(module: "redis", hint: "pip install redis")
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }
        let nodes = try await RedisScaleOutTests.startNodes(2, redis: redis)
        defer { for node in nodes { node.child.signal(SIGKILL) } }
        var peers: [TestPeer] = []
        for (i, node) in nodes.enumerated() {
            let peer = try await TestPeer.connect("p\(i)", url: node.wsURL)
            try await peer.send(.join(room: "news", user: "p\(i)"))
            try await peer.expect("history") { $0.type == "history" }
            peers.append(peer)
        }
        // Both nodes subscribed to the room's channel once both presences are seen.
        try await peers[0].expect("p1 joined") { $0.type == "join" && $0.user == "p1" }

        let publisher = try ChildProcess(executable: URL(fileURLWithPath: "/usr/bin/env"), arguments: [
            "python3", "-u", ChatPaths.peers.appendingPathComponent("redis_room_publish.py").path, redis.url, "news", "5"])
        try await publisher.waitForLine("redis-py done") { $0 == "DONE" }
        #expect(await publisher.waitForExit() == 0, "\(publisher.stderrText)")
        // Each PUBLISH reached a subscriber (the two nodes share nothing else).
        #expect(publisher.lines.dropLast().allSatisfy { (Int($0) ?? 0) >= 1 }, "\(publisher.lines)")
        for peer in peers {
            for i in 1...5 {
                let m = try await peer.expect("redis-py message \(i)") { $0.type == "message" && $0.text == "from redis-py \(i)" }
                #expect(m.user == "python" && m.room == "news")
            }
            let texts = await peer.events.filter { $0.type == "message" }.compactMap(\.text)
            #expect(texts == (1...5).map { "from redis-py \($0)" }, "in order, once each: \(texts)")
        }
    }

    @Test func aPostWhileRedisIsDownIs503() async throws {
        let dir = try ChatPaths.tempDirectory()
        let (keyPath, key) = try APIClients.keyFile(in: dir)
        let redis = try await RedisServerProcess()
        let nodes = try await RedisScaleOutTests.startNodes(1, redis: redis, extraArguments: ["--api-key-file", keyPath])
        defer { for node in nodes { node.child.signal(SIGKILL) } }
        let url = "\(nodes[0].httpURL)v1/rooms/lobby/messages"
        #expect(try await APIClients.python("POST", url, key: key, body: #"{"user":"u","text":"before"}"#).status == 200)
        await redis.kill()
        // Redis's absence is noticed at once (connection refused) or at the request's deadline:
        // 503 either way (`unavailable`, or the library's `timeout`), with the JSON error body.
        let post = try await APIClients.python("POST", url, key: key, body: #"{"user":"u","text":"while down"}"#)
        #expect(post.status == 503 && post.errorType != nil, "\(post)")
        let get = try await APIClients.python("GET", url, key: key)
        #expect(get.status == 503 && get.errorType != nil, "\(get)")
    }
}
