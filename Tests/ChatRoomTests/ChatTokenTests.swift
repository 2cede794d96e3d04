#if JWTSupport
import Foundation
import Switchboard
import SwitchboardCore
import SwitchboardTestSupport
import ChatRoomCore
import Testing

/// `chat-room serve --jwt-secret-file` (issue 33, item 3): each connection is the `sub` of its
/// token, named by its `name`, limited to the rooms of its `rooms` claim, closed with 4001 at
/// the token's `exp` unless a `refresh` of the same `sub` extended it. Tokens from TestTokens
/// (HS256). The time limit is a hang guard only: every wait has its own bound.
@Suite(.serialized, .timeLimit(.minutes(10)))
struct ChatTokenTests {
    /// Token lifetimes run on the wall clock: each test starts once the process is responsive
    /// (not while the whole suite is starting at once), with lifetimes sized for the load.
    init() async { await MachineLoad.waitUntilResponsive() }

    typealias Backend = ChatResumeTests.Backend
    /// 64 bytes: jwt-kit asserts (debug builds) that an HMAC key is at least as long as the hash (HS512).
    static let secret = String(repeating: "chat-token-tests-secret-", count: 3).prefix(64).description

    /// The secret in a file, for `--jwt-secret-file`.
    static func secretFile() throws -> String {
        let file = try ChatPaths.tempDirectory().appendingPathComponent("jwt-secret")
        try Data((secret + "\n").utf8).write(to: file)
        return file.path
    }

    static func arguments() throws -> [String] { ["--jwt-secret-file", try secretFile()] + ChatResumeTests.noRateLimit }

    /// A server with tokens (SQLite).
    static func server() async throws -> ChatServerProcess {
        try await ChatServerProcess(db: try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite"),
                                    extraArguments: try arguments())
    }

    /// A token for `sub` expiring `lifetime` from now (whole seconds, as `exp` is).
    static func token(sub: String, name: String? = nil, lifetime: Duration = .seconds(600), rooms: [String]? = nil,
                      secret: String = secret) -> String {
        var claims: [String: Any] = ["sub": sub, "exp": TestTokens.unixTime(Date() + Double(lifetime.components.seconds))]
        if let name { claims["name"] = name }
        if let rooms { claims["rooms"] = rooms }
        return TestTokens.hs256(secret: secret, claims: claims)
    }

    static func exp(of token: String) throws -> Date { try #require(TokenExpiry.of(token)) }

    /// True under ThreadSanitizer (its runtime exports `__tsan_init`): the server and the
    /// clients run 5-10x slower, so the short token lifetimes below grow.
    static let isThreadSanitized: Bool = {
        guard let main = dlopen(nil, RTLD_NOW) else { return false }
        return dlsym(main, "__tsan_init") != nil
    }()

    /// A lifetime the upgrade and a first exchange get through before it ends (2 s; 10 s under
    /// ThreadSanitizer, where the whole suite runs in parallel on 2 cores), and one with room
    /// for a refresh at 80% (3 s; 15 s); both stretched by the machine's load (``MachineLoad``).
    static var short: Duration { (isThreadSanitized ? .seconds(10) : .seconds(2)) * MachineLoad.factor }
    static var refreshable: Duration { (isThreadSanitized ? .seconds(15) : .seconds(3)) * MachineLoad.factor }

    /// Waits (on the clock: what is tested is that a deadline passed) until `date` is past.
    static func waitUntilPast(_ date: Date) async throws {
        while Date() <= date { try await Task.sleep(for: .milliseconds(50)) }
    }

    @Test func connectionWhoseTokenExpiresIsClosedWith4001() async throws {
        let server = try await Self.server()
        defer { server.child.signal(SIGKILL) }
        let token = Self.token(sub: "u1", name: "alice", lifetime: Self.short)
        let alice = try await TestPeer.connect("alice", url: server.wsURL, token: token)
        try await alice.send(.join(room: "r", user: nil))
        #expect(try await alice.expect("presence") { $0.type == "presence" }.users == ["alice"])
        // Bounded past the token's lifetime (stretched by the machine's load), not a fixed 60 s.
        #expect(try await alice.waitForClose(timeout: Self.short + .seconds(60)) == 4001)
        #expect(await alice.socket.closeStatus?.reason == "token expired")
        // Not before its time (the verifier's leeway never shortens it).
        #expect(Date() >= (try Self.exp(of: token)).addingTimeInterval(-0.5))
    }

    @Test func refreshWithTheSameSubjectMovesTheDeadline() async throws {
        let server = try await Self.server()
        defer { server.child.signal(SIGKILL) }
        // The refresh goes first, right after the upgrade: what must fit in the first token's
        // lifetime is one round trip, not the join and its history as well (a fresh-clone run
        // stalled past a 2 s lifetime before the history came, and the connection got its
        // 4001 first).
        let first = Self.token(sub: "u1", name: "alice", lifetime: Self.refreshable)
        let alice = try await TestPeer.connect("alice", url: server.wsURL, token: first)
        let next = Self.token(sub: "u1", name: "alice", lifetime: .seconds(600))
        try await alice.send(.refresh(token: next))
        let refreshed = try await alice.expect("refreshed") { $0.type == "refreshed" }
        #expect(refreshed.exp == TokenExpiry.of(next).flatMap(TokenExpiry.unixSeconds))
        try await alice.send(.join(room: "r", user: nil))
        try await alice.expect("history") { $0.type == "history" }
        // Past the first token's exp: still connected, still in the room.
        try await Self.waitUntilPast(try Self.exp(of: first).addingTimeInterval(1))
        _ = try await ChatResumeTests.post(alice, "r", "after the first exp")
        #expect(await alice.finished == false)
    }

    /// A `refresh` with another `sub`'s token, or one signed with another key, is refused
    /// (`invalid_token`) and the connection still closes at its first token's `exp`.
    @Test func refreshWithAnotherSubjectIsRefusedAndTheOldDeadlineHolds() async throws {
        let server = try await Self.server()
        defer { server.child.signal(SIGKILL) }
        let first = Self.token(sub: "u1", name: "alice", lifetime: Self.refreshable)
        let alice = try await TestPeer.connect("alice", url: server.wsURL, token: first)
        try await alice.send(.refresh(token: Self.token(sub: "u2", name: "alice")))
        let other = try await alice.expectError(code: "invalid_token", type: "authentication_error")
        #expect(!other.raw.contains("eyJ"), "the token is never echoed: \(other)")
        try await alice.send(.refresh(token: Self.token(sub: "u1", name: "alice", secret: "another secret")))
        try await alice.expectError(code: "invalid_token", type: "authentication_error")
        try await alice.send(.refresh(token: "not.a.token"))
        try await alice.expectError(code: "invalid_token", type: "authentication_error")
        #expect(!(await alice.events).contains { $0.type == "refreshed" })
        // Up to 60 s under ThreadSanitizer on a loaded machine: the bound is past it.
        #expect(try await alice.waitForClose(timeout: Self.refreshable + .seconds(60)) == 4001)
    }

    /// The same client with a token provider (SocketAdapter): asked again at 80% of each
    /// token's lifetime, the new token sent in-band; it stays connected across three expiries.
    @Test func tokenProviderKeepsTheClientConnectedAcrossThreeExpiries() async throws {
        let server = try await Self.server()
        defer { server.child.signal(SIGKILL) }
        let issued = TestLock<[String]>([])
        let socket = SocketAdapter(tokenProvider: {
            // Declared to the client as expiring halfway through its real life: the refresh comes
            // at 40% of it, leaving 60% (not 20%: 0.6 s of a 3 s token, missed by a loaded
            // machine running the whole suite) for it to get through. The server closes at `exp`.
            let token = Self.token(sub: "u1", name: "alice", lifetime: Self.refreshable)
            issued.withLock { $0.append(token) }
            let now = Date()
            let declared = TokenExpiry.of(token).map { now.addingTimeInterval($0.timeIntervalSince(now) / 2) }
            return SocketToken(token, expiresAt: declared)
        }, refreshCommand: { ChatCommand.refresh(token: $0.value).message })
        let alice = try await TestPeer.connect("alice", url: server.wsURL, socket: socket)
        try await alice.send(.join(room: "r", user: nil))
        try await alice.expect("history") { $0.type == "history" }
        for n in 1...3 { try await alice.expect("refreshed #\(n)") { $0.type == "refreshed" && $0.exp != nil } }
        let firstThree = issued.withLock { Array($0.prefix(3)) }
        #expect(firstThree.count == 3)
        // Three tokens' deadlines passed while connected: the first two for sure.
        try await Self.waitUntilPast(try Self.exp(of: try #require(firstThree.dropLast().last)))
        _ = try await ChatResumeTests.post(alice, "r", "still here")
        #expect(await alice.finished == false)
        #expect(!(await alice.events).contains { $0.type == "error" })
    }

    @Test func joinUnderAnotherNameIsForbiddenAndWithoutUserTakesTheTokensName() async throws {
        let server = try await Self.server()
        defer { server.child.signal(SIGKILL) }
        let alice = try await TestPeer.connect("alice", url: server.wsURL, token: Self.token(sub: "u1", name: "Alice"))
        try await alice.send(.join(room: "r", user: "bob"))
        try await alice.expectError(code: "forbidden", type: "permission_error")
        try await alice.send(.join(room: "r", user: nil))
        #expect(try await alice.expect("presence") { $0.type == "presence" }.users == ["Alice"])
        try await alice.send(.join(room: "s", user: "Alice"))
        #expect(try await alice.expect("presence in s") { $0.type == "presence" && $0.room == "s" }.users == ["Alice"])
        let m = try await ChatResumeTests.post(alice, "r", "hello")
        #expect((await alice.events).first { $0.id == m }?.user == "Alice")
        // No name claim: the name is the sub.
        let bare = try await TestPeer.connect("bare", url: server.wsURL, token: Self.token(sub: "u9"))
        try await bare.send(.join(room: "r", user: nil))
        #expect(try await bare.expect("presence") { $0.type == "presence" }.users == ["Alice", "u9"])
        // Without a token the upgrade is refused.
        await #expect(throws: SwitchboardError.self) { _ = try await TestPeer.connect("anon", url: server.wsURL) }
    }

    @Test func roomsClaimLimitsTheRooms() async throws {
        let server = try await Self.server()
        defer { server.child.signal(SIGKILL) }
        let token = Self.token(sub: "u1", name: "alice", rooms: ["lobby", "team-*"])
        let alice = try await TestPeer.connect("alice", url: server.wsURL, token: token)
        for room in ["random", "team", "Lobby"] {
            try await alice.send(.join(room: room, user: nil))
            let e = try await alice.expectError(code: "room_forbidden", type: "permission_error")
            #expect(e.error?.message.contains(room) == true)
        }
        for room in ["lobby", "team-red"] {
            try await alice.send(.join(room: room, user: nil))
            try await alice.expect("presence in \(room)") { $0.type == "presence" && $0.room == room }
        }
        // Nothing of a refused room reaches the refused client.
        #expect(!(await alice.events).contains { $0.room == "random" })
    }

    /// alice's old connection is still open (its end not noticed) when she joins again from a
    /// new one with her token (a plain join: no `since`, no `rejoinKey`; with Redis through the
    /// other process): the presence is taken over, bob sees no `leave` and no new `join`, not
    /// even once the old connection ends. Another `sub` with the same display name gets
    /// `name_taken`.
    @Test(arguments: Backend.allCases)
    func reconnectOfTheSameSubjectTakesOverItsStalePresenceWithoutFlicker(_ backend: Backend) async throws {
        var nodes: [ChatServerProcess] = []
        var redis: RedisServerProcess?
        switch backend {
        case .sqlite:
            let server = try await Self.server()
            nodes = [server, server]
        case .redis:
            redis = try await RedisServerProcess()
            nodes = try await RedisScaleOutTests.startNodes(2, redis: try #require(redis), extraArguments: try Self.arguments())
        }
        defer { for node in nodes { node.child.signal(SIGKILL) }; withExtendedLifetime(redis) {} }
        let old = try await TestPeer.connect("alice-old", url: nodes[0].wsURL, token: Self.token(sub: "u1", name: "alice"))
        try await old.send(.join(room: "r", user: nil))
        try await old.expect("history") { $0.type == "history" }
        let bob = try await TestPeer.connect("bob", url: nodes[0].wsURL, token: Self.token(sub: "u2", name: "bob"))
        try await bob.send(.join(room: "r", user: nil))
        #expect(try await bob.expect("presence") { $0.type == "presence" }.users == ["alice", "bob"])

        // Another subject under the same display name: refused, alice keeps the name.
        let mallory = try await TestPeer.connect("mallory", url: nodes[1].wsURL, token: Self.token(sub: "u3", name: "alice"))
        try await mallory.send(.join(room: "r", user: nil))
        try await mallory.expectError(code: "name_taken", type: "conflict_error")

        let new = try await TestPeer.connect("alice-new", url: nodes[1].wsURL, token: Self.token(sub: "u1", name: "alice"))
        try await new.send(.join(room: "r", user: nil))
        #expect(try await new.expect("the new presence") { $0.type == "presence" }.users == ["alice", "bob"])
        try await new.expect("history") { $0.type == "history" }
        let fromNew = try await ChatResumeTests.post(new, "r", "from the new connection")
        #expect(try await bob.expect("alice's new message") { $0.type == "message" && $0.id == fromNew }.user == "alice")

        await old.close()
        _ = try await old.waitForClose()
        // Ordered after the old connection's end on its server: the leave would be before it.
        let marker = try await ChatResumeTests.post(bob, "r", "after the old one ended")
        try await new.expect("bob's marker") { $0.type == "message" && $0.id == marker }
        let afterOldEnd = try await TestPeer.connect("carol", url: nodes[0].wsURL, token: Self.token(sub: "u4", name: "carol"))
        try await afterOldEnd.send(.join(room: "r", user: nil))
        #expect(try await afterOldEnd.expect("carol's presence") { $0.type == "presence" }.users == ["alice", "bob", "carol"])
        try await bob.expect("carol joined") { $0.type == "join" && $0.user == "carol" }
        let bobEvents = await bob.events
        #expect(!bobEvents.contains { $0.type == "leave" }, "\(bobEvents)")
        #expect(!bobEvents.contains { $0.type == "join" && $0.user == "alice" }, "\(bobEvents)")
    }

    /// SIGHUP re-reads the key file: tokens of the new secret are accepted, the old one's refused.
    @Test func hangUpReloadsTheSecretFile() async throws {
        let file = try Self.secretFile()
        let server = try await ChatServerProcess(db: try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite"),
                                                 extraArguments: ["--jwt-secret-file", file])
        defer { server.child.signal(SIGKILL) }
        let rotated = String(repeating: "rotated-secret-", count: 5).prefix(64).description
        try Data(rotated.utf8).write(to: URL(fileURLWithPath: file))
        server.child.signal(SIGHUP)
        let deadline = ContinuousClock.now + .seconds(60)   // a failure guard only
        while !server.child.stderrText.contains("JWT keys reloaded") && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(server.child.stderrText.contains("JWT keys reloaded"), "\(server.child.stderrText)")
        #expect(!server.child.stderrText.contains(rotated), "key material is never logged")
        let fresh = try await TestPeer.connect("fresh", url: server.wsURL, token: Self.token(sub: "u1", secret: rotated))
        try await fresh.send(.join(room: "r", user: nil))
        try await fresh.expect("presence") { $0.type == "presence" }
        await #expect(throws: SwitchboardError.self) {
            _ = try await TestPeer.connect("stale", url: server.wsURL, token: Self.token(sub: "u2"))
        }
    }

    @Test func sharedTokenBesideAJWTKeyExits64() async throws {
        let secret = try Self.secretFile()
        for extra in [["--token", "shared"], ["--jwt-public-key", secret]] {
            let child = try ChildProcess(executable: try ChatPaths.binary(),
                                         arguments: ["serve", "--port", "0", "--db", ":memory:", "--jwt-secret-file", secret] + extra)
            #expect(await child.waitForExit() == 64, "\(extra): \(child.stderrText)")
        }
        let env = try ChildProcess(executable: try ChatPaths.binary(),
                                   arguments: ["serve", "--port", "0", "--db", ":memory:", "--jwt-secret-file", secret],
                                   environment: ["CHAT_TOKEN": "shared"])
        #expect(await env.waitForExit() == 64, "\(env.stderrText)")
    }

    /// `chat-room join --token-command`: the command's output is the token (no --user: the
    /// token's name); with 3-second tokens the client refreshes in-band and stays past the
    /// first token's expiry.
    @Test func terminalClientWithTokenCommandJoinsAndRefreshes() async throws {
        let server = try await Self.server()
        defer { server.child.signal(SIGKILL) }
        let bob = try await TestPeer.connect("bob", url: server.wsURL, token: Self.token(sub: "u2", name: "bob"))
        try await bob.send(.join(room: "general", user: nil))
        try await bob.expect("history") { $0.type == "history" }
        let mint = ChatPaths.peers.appendingPathComponent("mint_token.py").path
        // Twice the usual refreshable lifetime: the client refreshes at 80% of it, and 20% of a
        // 3 s token (0.6 s) is a thin margin on a machine running the whole suite.
        let lifetime = (Self.refreshable * 2).components.seconds
        let started = Date()
        let alice = try ChildProcess(executable: try ChatPaths.binary(), arguments: [
            "join", "--url", server.wsURL, "--room", "general", "--no-reconnect",
            "--token-command", "python3 '\(mint)' '\(Self.secret)' u1 alice \(lifetime)",
        ])
        defer { alice.signal(SIGKILL) }
        try await alice.waitForLine("presence line") { $0 == "[general] users: bob, alice" }
        // Bounded by the lifetime (the refresh comes at 80% of up to 120 s under ThreadSanitizer
        // on a loaded machine), not the default 60 s, which a fresh-clone run saw run out.
        try await alice.waitForLine(timeout: .seconds(Int64(lifetime) + 60), "a refresh") { $0 == "* token refreshed" }
        // Past any first token's exp (at most one lifetime after the start): still connected.
        try await Self.waitUntilPast(started.addingTimeInterval(Double(lifetime) + 1))
        alice.write("still here\n")
        let m = try await bob.expect("alice's message") { $0.type == "message" && $0.text == "still here" }
        #expect(m.user == "alice")
        #expect(!alice.lines.contains { $0.hasPrefix("connection closed") }, "\(alice.lines)")
        // --token and --token-command exclude each other.
        let both = try ChildProcess(executable: try ChatPaths.binary(), arguments: [
            "join", "--url", server.wsURL, "--token", "x", "--token-command", "true",
        ])
        #expect(await both.waitForExit() == 64)
    }

    /// `--token-command` has a time limit (`--token-timeout`): a command that never finishes is
    /// killed with what it started, and the client says so and exits 1 instead of hanging
    /// before its first connection.
    @Test func tokenCommandThatNeverFinishesIsKilledAtItsTimeLimit() async throws {
        let pidFile = try ChatPaths.tempDirectory().appendingPathComponent("sleeper.pid").path
        // The command's child keeps the output pipe open: killing the shell alone would not end it.
        let client = try ChildProcess(executable: try ChatPaths.binary(), arguments: [
            "join", "--url", "ws://127.0.0.1:9/v1/ws", "--no-reconnect", "--token-timeout", "1",
            "--token-command", "sleep 600 & echo $! > '\(pidFile)'; wait",
        ])
        defer { client.signal(SIGKILL) }
        #expect(await client.waitForExit() == 1, "\(client.lines) \(client.stderrText)")
        #expect(client.lines.contains { $0.contains("--token-command did not finish within 1 s") },
                "\(client.lines) \(client.stderrText)")
        let written = try String(contentsOfFile: pidFile, encoding: .utf8)
        let sleeper = try #require(Int32(written.trimmingCharacters(in: .whitespacesAndNewlines)))
        #if os(Linux)
        // Killed: gone, or a zombie until its new parent collects it.
        let stat = try? String(contentsOfFile: "/proc/\(sleeper)/stat", encoding: .utf8)
        let state = stat.flatMap { $0.split(separator: ")").last?.split(separator: " ").first }
        #expect(stat == nil || state == "Z", "the command's child \(sleeper) still runs: \(stat ?? "")")
        #endif
    }
}
#endif
