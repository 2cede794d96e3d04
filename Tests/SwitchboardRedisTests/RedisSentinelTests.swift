import Foundation
import Switchboard
import SwitchboardCore
@testable import SwitchboardRedis
import SwitchboardTestSupport
import Testing

/// `redis-sentinel://` and `rediss-sentinel://` URLs: pure parsing.
struct RedisSentinelURLTests {
    typealias Address = RedisURL.Address

    @Test func forms() throws {
        let one = try RedisURL("redis-sentinel://10.0.0.1/mymaster")
        #expect(one.sentinels == RedisURL.Sentinels(addresses: [Address(host: "10.0.0.1", port: 26379)], masterName: "mymaster"))
        #expect(one.host == "10.0.0.1" && one.port == 26379 && one.database == 0 && !one.useTLS)
        #expect(one == RedisURL(sentinels: .init(addresses: [Address(host: "10.0.0.1", port: 26379)], masterName: "mymaster")))

        let many = try RedisURL("rediss-sentinel://alice:p%40ss@s1:26380,[::1],[fe80::2]:7000,s4/my-master.1_x/3")
        #expect(many.useTLS && many.username == "alice" && many.password == "p@ss" && many.database == 3)
        #expect(many.sentinels?.addresses == [Address(host: "s1", port: 26380), Address(host: "::1", port: 26379),
                                              Address(host: "fe80::2", port: 7000), Address(host: "s4", port: 26379)])
        #expect(many.sentinels?.masterName == "my-master.1_x")
        #expect(many.sentinels?.password == nil && many.sentinels?.username == nil)
        #expect(try RedisURL("REDIS-SENTINEL://h/m/").database == 0)

        let secured = try RedisURL("redis-sentinel://:master-pw@h:1/m?sentinelPassword=s%26p%40w&sentinelUsername=watch")
        #expect(secured.password == "master-pw")
        #expect(secured.sentinels?.password == "s&p@w" && secured.sentinels?.username == "watch")
        // An unencoded `@` in the sentinel password: the query is split off first.
        let at = try RedisURL("redis-sentinel://h/m?sentinelPassword=a@b")
        #expect(at.sentinels?.password == "a@b" && at.host == "h" && at.password == nil)
        // A master password with unencoded delimiters is still taken whole.
        let raw = try RedisURL("redis-sentinel://:a/b?c@d@h/m")
        #expect(raw.password == "a/b?c@d" && raw.sentinels?.addresses == [Address(host: "h", port: 26379)])
    }

    @Test(arguments: [
        "redis-sentinel://", "redis-sentinel://h", "redis-sentinel://h/", "redis-sentinel:///m",
        "redis-sentinel://,h/m", "redis-sentinel://h,/m", "redis-sentinel://h,,i/m", "redis-sentinel://h:0/m",
        "redis-sentinel://h:65536/m", "redis-sentinel://h:+1/m", "redis-sentinel://h:x/m", "redis-sentinel://[::1/m",
        "redis-sentinel://[::1]x/m", "redis-sentinel://h/m/x", "redis-sentinel://h/m/1/2", "redis-sentinel://h/m/-1",
        "redis-sentinel://h/my%20master", "redis-sentinel://h/my master", "redis-sentinel://h/m?db=1",
        "redis-sentinel://h/m?sentinelPassword=a&other=b", "redis-sentinel://h/m?sentinelPassword=a&sentinelPassword=b",
        "redis-sentinel://h/m?sentinelPassword=%zz", "redis-sentinel://h/m#frag", "redis://h/m",
        "redis://h?sentinelPassword=x", "sentinel://h/m",
        "redis-sentinel://h/" + String(repeating: "m", count: 129),
    ])
    func refused(_ text: String) {
        #expect(throws: RedisURLError.self) { try RedisURL(text) }
    }

    @Test func theLongestNameIsAccepted() throws {
        let name = String(repeating: "m", count: 128)
        #expect(try RedisURL("redis-sentinel://h/\(name)").sentinels?.masterName == name)
    }

    @Test func passwordsAreNeverShown() throws {
        let url = try RedisURL("rediss-sentinel://bob:Zq7-master@h1:1,[::1]:2/m/4?sentinelPassword=Yw8-sentinel&sentinelUsername=eve")
        #expect(url.description == "rediss-sentinel://bob:<redacted>@h1:1,[::1]:2/m/4?sentinelPassword=<redacted>&sentinelUsername=eve")
        var dumped = ""
        dump(url, to: &dumped)
        for text in [url.description, url.debugDescription, "\(url)", String(reflecting: url), dumped,
                     URLRedaction.redacting("rediss-sentinel://h/m?sentinelPassword=Yw8-sentinel")] {
            #expect(!text.contains("Zq7") && !text.contains("Yw8"), "\(text)")
        }
        for bad in ["redis-sentinel://bob:Zq7@h:x/m?sentinelPassword=Yw8", "redis-sentinel://bob:Zq7@h/m?sentinelPassword=Yw8&x=1",
                    "redis-sentinel://bob:Zq7@h/m?sentinelPassword=Yw8%z", "redis-sentinel://bob:Zq7@,/m?sentinelPassword=Yw8"] {
            do {
                _ = try RedisURL(bad)
                Issue.record("accepted \(bad)")
            } catch {
                #expect(!error.description.contains("Zq7") && !error.description.contains("Yw8"), "\(error)")
            }
        }
    }
}

/// Real processes: a master, a replica and three sentinels (``RedisSentinelGroup``).
@Suite(.serialized, .timeLimit(.minutes(5)))
struct RedisSentinelTests {
    static func configuration() -> RedisConfiguration {
        var configuration = RedisConfiguration()
        configuration.maximumReconnectDelay = .milliseconds(500)
        return configuration
    }

    /// Retries `body` (every 50 ms) until it succeeds, at most 60 s (a stall guard, not a figure).
    static func eventually<T>(_ what: String, _ body: () async throws -> T?) async throws -> T {
        let deadline = ContinuousClock.now + .seconds(60)
        var lastError: Error?
        while ContinuousClock.now < deadline {
            do {
                if let value = try await body() { return value }
            } catch {
                lastError = error
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw RedisServerProcess.Failure("timed out waiting for \(what): \(lastError.map { "\($0)" } ?? "")")
    }

    @Test func aClientFindsTheMasterThroughTheSentinels() async throws {
        let group = try await RedisSentinelGroup()
        let states = StateLog()
        let client = try RedisClient(url: RedisURL(group.url(path: "/2")), configuration: Self.configuration(),
                                     onStateChange: { states.append($0) })
        try await client.send("SET", "k", "v")
        #expect(try await client.send("GET", "k").string == "v")
        #expect(try await client.send("ROLE").array?.first?.string == "master")
        #expect(await client.serverAddress == RedisURL.Address(host: "127.0.0.1", port: try group.masterPort()))
        #expect(try group.servers[0].command("-n", "2", "GET", "k") == "v")
        #expect(states.all == [.connected(reconnected: false)])
        await client.close()
    }

    @Test func afterAFailoverTheSameClientAndSubscriberWorkOnThePromotedReplica() async throws {
        let group = try await RedisSentinelGroup()
        let url = try RedisURL(group.url())
        let states = StateLog()
        let received = MessageLog()
        let client = try RedisClient(url: url, configuration: Self.configuration())
        let subscriber = try RedisSubscriber(url: url, configuration: Self.configuration(),
                                             onStateChange: { states.append($0) }) { received.append($0, $1) }
        try await client.send("SET", "before", "1")
        try await states.wait { $0.contains(.connected(reconnected: false)) }
        #expect(await subscriber.subscribe("news"))
        #expect(try await client.send("PUBLISH", "news", "one").int == 1)
        try await received.wait { $0.count == 1 }
        let oldPort = try group.masterPort()
        // Written to the replica before the kill (WAIT), so the promoted one has it.
        #expect(try await client.send("WAIT", "1", "5000").int == 1)

        await group.servers[0].kill()
        let promoted = try await group.waitForFailover(from: oldPort)
        let failedOver = ContinuousClock.now
        // The same client, no restart: it asked the sentinels again and checked ROLE.
        let role = try await Self.eventually("the client on the new master") {
            try await client.send("ROLE").array?.first?.string
        }
        let moved = ContinuousClock.now - failedOver
        #expect(role == "master")
        #expect(await client.serverAddress == RedisURL.Address(host: "127.0.0.1", port: promoted.port))
        #expect(try await client.send("GET", "before").string == "1")
        // Promptly: the backoff is at most 0.5 s here and +switch-master moves it at once.
        #expect(moved < .seconds(15), "\(moved)")

        try await states.wait { $0.contains(.connected(reconnected: true)) }
        let delivered = try await Self.eventually("the subscriber on the new master") { () -> Int64? in
            guard subscriber.isReady else { return nil }
            let count = try await client.send("PUBLISH", "news", "two").int ?? 0
            return count > 0 ? count : nil
        }
        #expect(delivered == 1)
        try await received.wait { $0.contains { $0.1 == Array("two".utf8) } }
        #expect(try promoted.command("PUBSUB", "NUMSUB", "news").hasSuffix("1"))
        await client.close()
        await subscriber.close()
    }

    @Test func backplaneServersDeliverAgainAfterAFailover() async throws {
        let group = try await RedisSentinelGroup()
        let (a, _) = try await RedisTopicBackplaneTests.startServer(redis: group.url())
        let (b, backplaneB) = try await RedisTopicBackplaneTests.startServer(redis: group.url())
        defer { Task { await a.shutdown(); await b.shutdown() } }
        let a1 = try await RedisTopicBackplaneTests.Client(port: try await a.listeningPort, topic: "room")
        let b1 = try await RedisTopicBackplaneTests.Client(port: try await b.listeningPort, topic: "room")
        try await a1.send("before")
        try await b1.wait { $0.contains("before") }
        let oldPort = try group.masterPort()

        await group.servers[0].kill()
        _ = try await group.waitForFailover(from: oldPort)
        // Both backplanes follow the new master; then a message from A reaches B's client again.
        _ = try await Self.eventually("B's backplane on the new master") { backplaneB.isConnected ? true : nil }
        var sent = 0
        _ = try await Self.eventually("a message through the new master") { () -> Bool? in
            sent += 1
            try await a1.send("after-\(sent)")
            try await Task.sleep(for: .milliseconds(100))
            return b1.received.contains { $0.hasPrefix("after-") } ? true : nil
        }
        try await b1.send("from-b")
        try await a1.wait { $0.contains("from-b") }
        #expect(b1.received.filter { $0 == "before" }.count == 1)
    }

    @Test func allSentinelsDownGivesClearUnavailableErrorsThenRecovers() async throws {
        let group = try await RedisSentinelGroup()
        let client = try RedisClient(url: RedisURL(group.url()), configuration: Self.configuration())
        try await client.send("SET", "k", "v")
        let masterPort = try group.masterPort()
        for sentinel in group.sentinels { await sentinel.kill() }
        // Connected clients keep their master; a lost connection asks the sentinels, none answers.
        try group.servers[0].command("CLIENT", "KILL", "TYPE", "normal")
        let error = try await Self.eventually("an unavailable error") { () -> RedisError? in
            do {
                try await client.send("GET", "k")
                return nil
            } catch let error as RedisError {
                return error.kind == .unavailable ? error : nil
            }
        }
        #expect(error.kind == .unavailable)
        #expect(error.message.contains("127.0.0.1:\(group.sentinels[0].port)"), "\(error.message)")

        // No password anywhere: a URL with both, to sentinels that are down.
        let secret = try RedisClient(
            url: RedisURL(group.url(userinfo: "bob:Zq7-master@", query: "?sentinelPassword=Yw8-sentinel")),
            configuration: Self.configuration())
        do {
            try await secret.send("PING")
            Issue.record("answered with every sentinel down")
        } catch {
            #expect(error.kind == .unavailable)
            for text in [error.description, error.message, String(reflecting: error), secret.url.description] {
                #expect(!text.contains("Zq7") && !text.contains("Yw8"), "\(text)")
            }
        }
        await secret.close()

        for sentinel in group.sentinels { try await sentinel.restart() }
        let value = try await Self.eventually("the client back through the restarted sentinels") {
            try await client.send("GET", "k").string
        }
        #expect(value == "v")
        #expect(await client.serverAddress?.port == masterPort)
        await client.close()
    }

    @Test func switchMasterMovesAConnectedClientAtOnce() async throws {
        // A manual failover: the old master lives on as a replica, so the client's connection is
        // not always lost; only +switch-master tells it to move. The backoff is far longer than the
        // test allows, so nothing but the announcement can move it in time.
        let group = try await RedisSentinelGroup()
        var configuration = Self.configuration()
        configuration.initialReconnectDelay = .seconds(300)  // 150-300 s with jitter: longer than any guard
        configuration.maximumReconnectDelay = .seconds(300)
        let client = try RedisClient(url: RedisURL(group.url()), configuration: configuration)
        try await client.send("SET", "k", "1")
        let oldPort = try group.masterPort()
        #expect(await client.serverAddress?.port == oldPort)
        #expect(try await client.send("WAIT", "1", "5000").int == 1)

        try group.sentinels[0].command("SENTINEL", "FAILOVER", group.masterName)
        let promoted = try await group.waitForFailover(from: oldPort)
        let written = try await Self.eventually("a write accepted by the new master") { () -> Bool? in
            try await client.send("SET", "k", "2")
            return await client.serverAddress?.port == promoted.port ? true : nil
        }
        #expect(written)
        #expect(try await client.send("ROLE").array?.first?.string == "master")
        #expect(try promoted.command("GET", "k") == "2")
        await client.close()
    }

    @Test func aSilentSentinelIsPassedOverAfterTheTimeout() async throws {
        // Listed first, it accepts connections and never answers: the question goes to the next
        // sentinel after sentinelTimeout, and the +switch-master watcher moves on too.
        let group = try await RedisSentinelGroup()
        let silent = try FakeSentinel(masterPort: 0)
        defer { silent.stop() }
        var configuration = Self.configuration()
        configuration.sentinelTimeout = .milliseconds(300)
        // Only +switch-master can move the client in time (as in the test above).
        configuration.initialReconnectDelay = .seconds(300)
        configuration.maximumReconnectDelay = .seconds(300)
        let url = try RedisURL(group.url().replacingOccurrences(of: "redis-sentinel://",
                                                                with: "redis-sentinel://127.0.0.1:\(silent.port),"))
        #expect(url.sentinels?.addresses.count == 4)
        let client = try RedisClient(url: url, configuration: configuration)
        try await client.send("SET", "k", "v")
        #expect(await client.serverAddress?.port == (try group.masterPort()))
        // The watcher left the silent one for a real sentinel: it sees this client's master move.
        let oldPort = try group.masterPort()
        try group.sentinels[0].command("SENTINEL", "FAILOVER", group.masterName)
        let promoted = try await group.waitForFailover(from: oldPort)
        _ = try await Self.eventually("the client on the new master") { () -> Bool? in
            try await client.send("SET", "k", "w")
            return await client.serverAddress?.port == promoted.port ? true : nil
        }
        #expect(try promoted.command("GET", "k") == "w")
        await client.close()
    }

    @Test func tlsToTheSentinelsAndTheMaster() async throws {
        let (_, files) = try RedisTLSTests.makePKI()
        let group = try await RedisSentinelGroup(tls: files)
        var configuration = Self.configuration()
        configuration.tls = TLSConfiguration(trustRoots: .caFile(files.caCertificate))
        let url = try RedisURL(group.url().replacingOccurrences(of: "redis-sentinel://", with: "rediss-sentinel://"))
        let client = try RedisClient(url: url, configuration: configuration)
        try await client.send("SET", "k", "v")
        #expect(try await client.send("ROLE").array?.first?.string == "master")
        let oldPort = try group.masterPort()
        #expect(await client.serverAddress?.port == oldPort)
        #expect(try await client.send("WAIT", "1", "5000").int == 1)

        await group.servers[0].kill()
        let promoted = try await group.waitForFailover(from: oldPort)
        let value = try await Self.eventually("the client on the new master, over TLS") { () -> String? in
            let value = try await client.send("GET", "k").string
            return await client.serverAddress?.port == promoted.port ? value : nil
        }
        #expect(value == "v")
        // The default trust store does not know the test CA: refused, never used unverified.
        let untrusted = try RedisClient(url: url, configuration: Self.configuration())
        do {
            try await untrusted.send("PING")
            Issue.record("an unverifiable sentinel was accepted")
        } catch {
            #expect(error.kind == .unavailable)
        }
        await untrusted.close()
        await client.close()
    }

    @Test func aServerThatIsNotTheMasterIsRefused() async throws {
        // A lying sentinel names a replica: ROLE says so, and the client refuses to use it.
        let master = try await RedisServerProcess()
        let replica = try await RedisServerProcess(arguments: ["--replicaof", "127.0.0.1", String(master.port)])
        let liar = try FakeSentinel(masterPort: replica.port)
        defer { liar.stop() }
        let client = try RedisClient(url: RedisURL("redis-sentinel://127.0.0.1:\(liar.port)/switchboard"),
                                     configuration: Self.configuration())
        let error = try await Self.eventually("a refusal") { () -> RedisError? in
            do {
                try await client.send("GET", "k")
                return nil
            } catch let error as RedisError {
                return error.message.contains("is not the master") ? error : nil
            }
        }
        #expect(error.kind == .unavailable)
        #expect(error.message.contains("127.0.0.1:\(replica.port)") && error.message.contains("slave"), "\(error.message)")
        #expect(await client.serverAddress == nil)
        // It keeps asking the sentinels (it never settles on the replica).
        _ = try await Self.eventually("a second question to the sentinel") { liar.questions >= 2 ? true : nil }
        await client.close()
        withExtendedLifetime(master) {}
    }
}

/// A sentinel that lies, in Python: every `SENTINEL get-master-addr-by-name` is answered with
/// 127.0.0.1 and a given port, every `SUBSCRIBE` is confirmed; or, with port 0, one that accepts
/// connections and never answers anything. Counts the questions (stdout).
final class FakeSentinel: @unchecked Sendable {
    private let process = Process()
    private let lock = NSLock()
    private var asked = 0
    private var reader: PipeReader?
    let port: Int
    var questions: Int { lock.withLock { asked } }

    static let script = #"""
        import socket, sys, threading
        master = sys.argv[1].encode()
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        print(listener.getsockname()[1], flush=True)
        def serve(c):
            data = b""
            while master == b"0":
                if not c.recv(4096):
                    return
            while True:
                chunk = c.recv(4096)
                if not chunk:
                    return
                data += chunk
                if b"get-master-addr-by-name" in data:
                    print("asked", flush=True)
                    c.sendall(b"*2\r\n$9\r\n127.0.0.1\r\n$%d\r\n%s\r\n" % (len(master), master))
                    data = b""
                elif b"SUBSCRIBE" in data:
                    c.sendall(b"*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n")
                    data = b""
        while True:
            c, _ = listener.accept()
            threading.Thread(target=serve, args=(c,), daemon=True).start()
        """#

    init(masterPort: Int) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", Self.script, String(masterPort)]
        let output = Pipe()
        process.standardOutput = output
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let handle = output.fileHandleForReading
        var line: [UInt8] = []
        while true {
            let byte = handle.readData(ofLength: 1)
            guard let b = byte.first else { throw RedisServerProcess.Failure("the fake sentinel did not start") }
            if b == UInt8(ascii: "\n") { break }
            line.append(b)
        }
        guard let port = Int(String(decoding: line, as: UTF8.self)) else {
            throw RedisServerProcess.Failure("the fake sentinel printed no port")
        }
        self.port = port
        reader = PipeReader(handle) { [weak self] chunk in
            let n = chunk.filter { $0 == UInt8(ascii: "\n") }.count
            guard let self else { return }
            self.lock.withLock { self.asked += n }
        }
    }

    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    deinit { stop() }
}
