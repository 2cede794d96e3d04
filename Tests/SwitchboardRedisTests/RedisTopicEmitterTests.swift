import Foundation
import Switchboard
import SwitchboardCore
@testable import SwitchboardRedis
import SwitchboardTestSupport
import Testing

/// `RedisTopicEmitter` and publishers in other languages (Python's redis-py, following
/// docs/redis-envelope.md) against two servers in this process, each with its own
/// `RedisTopicBackplane` on one real `redis-server`.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct RedisTopicEmitterTests {
    /// A WebSocket client of `/sub?topic=` (``RedisTopicBackplaneTests/startServer(redis:queue:)``):
    /// every message it received after the server's `ready`, text or binary.
    final class MessageClient: @unchecked Sendable {
        // Safety: `messages` and `ready` are only touched under `lock`.
        let adapter = SocketAdapter()
        private let lock = NSLock()
        private var messages: [WebSocketMessage] = []
        private var ready = false
        var received: [WebSocketMessage] { lock.withLock { messages } }
        var texts: [String] {
            received.compactMap { if case .text(let b) = $0 { String(decoding: b, as: UTF8.self) } else { nil } }
        }

        init(port: Int, topic: String) async throws {
            let stream = try await adapter.connectMessages(
                to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/sub?topic=\(topic)"))
            Task { [weak self] in
                for await message in stream {
                    guard let self else { return }
                    lock.withLock {
                        if !ready, message == .text(Array("ready\n".utf8)) { ready = true } else { messages.append(message) }
                    }
                }
            }
            // The route says `ready` once its server's Redis SUBSCRIBE is confirmed.
            try await wait("ready") { [self] in lock.withLock { ready } }
        }

        func wait(_ what: String, until condition: @escaping @Sendable ([WebSocketMessage]) -> Bool) async throws {
            try await wait(what) { [self] in condition(received) }
        }

        private func wait(_ what: String, _ condition: () -> Bool) async throws {
            let deadline = ContinuousClock.now + .seconds(60)
            while !condition() {
                if ContinuousClock.now >= deadline {
                    throw RedisServerProcess.Failure("timed out waiting for \(what); received \(received.count) messages")
                }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    /// Two servers on one Redis, and a client of `topic` on each.
    static func twoServers(redis: RedisServerProcess, topic: String) async throws
        -> (servers: [WebSocketServer], backplanes: [RedisTopicBackplane], clients: [MessageClient]) {
        let (a, backplaneA) = try await RedisTopicBackplaneTests.startServer(redis: redis.url)
        let (b, backplaneB) = try await RedisTopicBackplaneTests.startServer(redis: redis.url)
        let onA = try await MessageClient(port: try await a.listeningPort, topic: topic)
        let onB = try await MessageClient(port: try await b.listeningPort, topic: topic)
        return ([a, b], [backplaneA, backplaneB], [onA, onB])
    }

    static func shutdown(_ servers: [WebSocketServer]) async {
        for server in servers { await server.shutdown() }
    }

    // MARK: The emitter

    @Test func emitterReachesEveryServerOnceInOrder() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }
        let (servers, backplanes, clients) = try await Self.twoServers(redis: redis, topic: "news")
        let emitter = try RedisTopicEmitter(url: RedisURL(redis.url))
        #expect(emitter.nodeID.count == 32 && !backplanes.contains { $0.nodeID == emitter.nodeID })

        var counts: [Int] = []
        for i in 0..<100 { counts.append(try await emitter.publish(text: "n\(i)", to: "news")) }
        // PUBLISH's reply: both servers' subscriber connections got every one.
        #expect(counts == Array(repeating: 2, count: 100))
        for client in clients {
            try await client.wait("n99") { $0.contains(.text(Array("n99".utf8))) }
            #expect(client.texts == (0..<100).map { "n\($0)" })  // exactly once each, in order
        }
        for backplane in backplanes {
            #expect(backplane.statistics.received == 100)
            #expect(backplane.statistics.malformed == 0)
        }
        // A topic nobody subscribes to: published, received by nobody.
        #expect(try await emitter.publish(text: "void", to: "nobody") == 0)
        await emitter.close()
        await Self.shutdown(servers)
    }

    @Test func emitterPublishesBinaryMessages() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }
        let (servers, _, clients) = try await Self.twoServers(redis: redis, topic: "bin")
        let emitter = try RedisTopicEmitter(url: RedisURL(redis.url))
        let payloads: [[UInt8]] = [[0x00, 0xff, 0xc3], [], Array(repeating: 0x80, count: 70_000)]
        for payload in payloads {
            #expect(try await emitter.publish(.binary(payload), to: "bin", compress: false) == 2)
        }
        try await emitter.publish(text: "end", to: "bin")
        for client in clients {
            try await client.wait("end") { $0.last == .text(Array("end".utf8)) }
            #expect(client.received == payloads.map { .binary($0) } + [.text(Array("end".utf8))])
        }
        await emitter.close()
        await Self.shutdown(servers)
    }

    @Test func emitterEnvelopeIsTheBackplanesFormatWithItsNode() throws {
        let emitter = try RedisTopicEmitter(url: RedisURL("redis://:hunter2-secret@127.0.0.1:1"), prefix: "app:")
        #expect(emitter.channel(for: "room:lobby") == "app:topic:room:lobby")
        let node = try #require(hexBytes(emitter.nodeID))
        #expect(emitter.envelopeHeader(binary: false) == [1, 2] + node)
        #expect(emitter.envelopeHeader(binary: true, compress: false) == [1, 1] + node)
        #expect(emitter.envelope(.text(Array("hi".utf8))) == [1, 2] + node + Array("hi".utf8))
        let decoded = try #require(BackplaneEnvelope(decoding: emitter.envelope(.binary([9]), compress: false)))
        #expect(decoded == BackplaneEnvelope(message: .binary([9]), compress: false, node: node))
        #expect(!"\(emitter.url)".contains("hunter2-secret"))
    }

    @Test func emitterRefusesInvalidTextAndOversizedEnvelopesWithoutSending() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }
        var configuration = RedisConfiguration()
        configuration.parseLimits.maxBulkLength = 1_000
        let emitter = try RedisTopicEmitter(url: RedisURL(redis.url), configuration: configuration)
        #expect(emitter.maximumEnvelopeBytes == 1_000)
        await #expect(throws: RedisError.self) { try await emitter.publish(.text([0x61, 0xff]), to: "t") }
        do {
            try await emitter.publish(.binary(Array(repeating: 1, count: 1_000 - 18 + 1)), to: "t")
            Issue.record("an envelope above the limit was published")
        } catch {
            #expect(error.kind == .invalidArgument)
        }
        // Exactly at the limit is fine.
        #expect(try await emitter.publish(.binary(Array(repeating: 1, count: 1_000 - 18)), to: "t") == 0)
        await emitter.close()
    }

    @Test func emitterFailsWhileRedisIsDownAndRecoversAfterwards() async throws {
        let password = "pw-never-logged-42"
        let redis = try await RedisServerProcess(password: password)
        defer { withExtendedLifetime(redis) {} }
        var configuration = RedisConfiguration()
        configuration.maximumReconnectDelay = .milliseconds(200)
        let emitter = try RedisTopicEmitter(url: RedisURL(redis.url), configuration: configuration)
        #expect(try await emitter.publish(text: "up", to: "t") == 0)
        await redis.stop()

        // Down: an error (not a hang), and the password is in no error.
        var kinds: Set<RedisError.Kind> = []
        for _ in 0..<3 {
            do {
                try await emitter.publish(text: "down", to: "t")
                Issue.record("a publish succeeded with Redis stopped")
            } catch {
                kinds.insert(error.kind)
                #expect(!"\(error)".contains(password) && !error.message.contains(password))
            }
        }
        // The first one may have been sent as the connection died; then unavailable at once.
        #expect(kinds.isSubset(of: [.unavailable, .connectionLost]) && kinds.contains(.unavailable))

        // Back: the emitter reconnects by itself.
        try await redis.restart()
        let deadline = ContinuousClock.now + .seconds(60)
        var outcome: Result<Int, RedisError> = .failure(RedisError(kind: .unavailable, message: "not tried"))
        while case .failure(let error) = outcome, error.kind == .unavailable, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            outcome = await Self.result { () async throws(RedisError) -> Int in try await emitter.publish(text: "again", to: "t") }
        }
        #expect(try outcome.get() == 0)
        await emitter.close()
        do {
            try await emitter.publish(text: "closed", to: "t")
            Issue.record("a publish succeeded after close()")
        } catch {
            #expect(error.kind == .closed)
        }
    }

    @Test func emitterAgainstASilentRedisTimesOut() async throws {
        let redis = try ScriptedRESPServer()
        var configuration = RedisConfiguration()
        configuration.commandTimeout = .milliseconds(300)
        let emitter = try RedisTopicEmitter(url: RedisURL(redis.url), configuration: configuration)
        let publish = Task { await Self.result { () async throws(RedisError) -> Int in try await emitter.publish(text: "x", to: "t") } }
        try await redis.acceptClient()
        let command = try await redis.readCommand()
        #expect(command.prefix(2) == ["PUBLISH", "switchboard:topic:t"])
        // Never answered: the publish fails once the command timeout has passed (no hang).
        let outcome = await publish.value
        #expect(throws: RedisError.self) { try outcome.get() }
        if case .failure(let error) = outcome { #expect(error.kind == .timedOut) }
        await emitter.close()
    }

    @Test func emitterRefusesAReplyThatIsNotACount() async throws {
        let redis = try ScriptedRESPServer()
        let emitter = try RedisTopicEmitter(url: RedisURL(redis.url))
        let publish = Task { await Self.result { () async throws(RedisError) -> Int in try await emitter.publish(text: "x", to: "t") } }
        try await redis.acceptClient()
        _ = try await redis.readCommand()
        try await redis.send("+OK\r\n")
        let outcome = await publish.value
        if case .failure(let error) = outcome { #expect(error.kind == .protocolError) } else { Issue.record("got \(outcome)") }
        await emitter.close()
    }

    /// The snippet of `RedisTopicEmitter`'s documentation (see ``announce(redisURL:)``).
    @Test func documentationSnippetRuns() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }
        let (server, _) = try await RedisTopicBackplaneTests.startServer(redis: redis.url)
        let client = try await MessageClient(port: try await server.listeningPort, topic: "ops")
        #expect(try await announce(redisURL: redis.url) == 1)
        try await client.wait("the announcement") { !$0.isEmpty }
        #expect(client.texts == ["deploy finished\n"])
        await server.shutdown()
    }

    // MARK: Publishers in other languages

    /// The Python example of docs/redis-envelope.md, run as it is but for Redis's port.
    @Test func documentedPythonExamplePublishesToEveryServer() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }
        let (servers, backplanes, clients) = try await Self.twoServers(redis: redis, topic: "news")
        let example = try Self.documentedPythonExample()
        #expect(example.contains("host=\"localhost\", port=6379"))
        let output = try await Self.python(example.replacingOccurrences(
            of: "host=\"localhost\", port=6379", with: "host=\"127.0.0.1\", port=\(redis.port)"))
        #expect(output == "2")  // the example prints PUBLISH's reply: both servers
        for client in clients {
            try await client.wait("the Python message") { !$0.isEmpty }
            #expect(client.texts == ["hello from Python"])
        }
        for backplane in backplanes { #expect(backplane.statistics.received == 1) }
        await Self.shutdown(servers)
    }

    @Test func pythonBinaryAndCompressFlagsAndOrderAreHonoured() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }
        let (servers, _, clients) = try await Self.twoServers(redis: redis, topic: "mixed")
        _ = try await Self.python("""
            import os, sys, redis
            r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]))
            node = os.urandom(16)
            for i in range(20):
                r.publish("switchboard:topic:mixed", b"\\x01\\x02" + node + ("t%d" % i).encode())
            r.publish("switchboard:topic:mixed", b"\\x01\\x01" + bytes(16) + b"\\x00\\xff")
            r.publish("switchboard:topic:mixed", b"\\x01\\x03" + node + "é".encode())
            """, arguments: [String(redis.port)])
        let expected: [WebSocketMessage] = (0..<20).map { .text(Array("t\($0)".utf8)) }
            + [.binary([0x00, 0xff]), .binary(Array("é".utf8))]
        for client in clients {
            try await client.wait("22 messages") { $0.count >= 22 }
            #expect(client.received == expected)
        }
        await Self.shutdown(servers)
    }

    @Test func malformedEnvelopesFromPythonAreIgnoredAndCounted() async throws {
        let redis = try await RedisServerProcess()
        defer { withExtendedLifetime(redis) {} }
        let (servers, backplanes, clients) = try await Self.twoServers(redis: redis, topic: "t")
        _ = try await Self.python("""
            import sys, redis
            r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]))
            c = "switchboard:topic:t"
            r.publish(c, b"")                                  # empty
            r.publish(c, b"\\x01\\x00" + bytes(15))            # shorter than the header
            r.publish(c, b"\\x02\\x00" + bytes(16) + b"v2")    # another version
            r.publish(c, b"\\x01\\x04" + bytes(16) + b"flag")  # a reserved flag bit
            r.publish(c, b"\\x01\\x00" + bytes(16) + b"\\xc3") # text, not UTF-8
            r.publish(c, "plain text, no envelope at all")
            r.publish(c, b"\\x01\\x00" + bytes(16) + b"valid")
            """, arguments: [String(redis.port)])
        for client in clients {
            // Redis keeps each channel's order: once `valid` is in, the others were read.
            try await client.wait("the valid envelope") { !$0.isEmpty }
            #expect(client.texts == ["valid"])
        }
        for backplane in backplanes {
            #expect(backplane.statistics.malformed == 6)
            #expect(backplane.statistics.received == 1)
        }
        await Self.shutdown(servers)
    }

    // MARK: Helpers

    /// The outcome of `body` as a value.
    static func result<T>(_ body: () async throws(RedisError) -> T) async -> Result<T, RedisError> {
        do {
            return .success(try await body())
        } catch {
            return .failure(error)
        }
    }

    /// The first ```python block of docs/redis-envelope.md.
    static func documentedPythonExample() throws -> String {
        let docs = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/redis-envelope.md")
        let text = try String(contentsOf: docs, encoding: .utf8)
        guard let start = text.range(of: "```python\n"),
              let end = text.range(of: "\n```", range: start.upperBound..<text.endIndex) else {
            throw RedisServerProcess.Failure("no ```python block in \(docs.path)")
        }
        return String(text[start.upperBound..<end.lowerBound])
    }

    /// Runs `python3 -c script arguments…` (off the cooperative pool) and returns its standard
    /// output, trimmed; throws with its standard error when it fails.
    static func python(_ script: String, arguments: [String] = []) async throws -> String {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                let process = Process()
                process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
                process.arguments = ["python3", "-c", script] + arguments
                let output = Pipe(), errors = Pipe()
                process.standardInput = FileHandle.nullDevice
                process.standardOutput = output
                process.standardError = errors
                do {
                    try process.run()
                } catch {
                    continuation.resume(throwing: RedisServerProcess.Failure("cannot start python3: \(error)"))
                    return
                }
                // Small outputs: read standard error after standard output has ended.
                let data = output.fileHandleForReading.readDataToEndOfFile()
                let stderr = errors.fileHandleForReading.readDataToEndOfFile()
                process.waitUntilExit()
                guard process.terminationStatus == 0 else {
                    continuation.resume(throwing: RedisServerProcess.Failure(
                        "python3 failed (\(process.terminationStatus)): \(String(decoding: stderr, as: UTF8.self))"))
                    return
                }
                continuation.resume(returning: String(decoding: data, as: UTF8.self)
                    .trimmingCharacters(in: .whitespacesAndNewlines))
            }
        }
    }
}

/// The bytes of a hexadecimal string (nil if it is not one).
private func hexBytes(_ hex: String) -> [UInt8]? {
    let digits = Array(hex.utf8)
    guard digits.count % 2 == 0 else { return nil }
    var bytes: [UInt8] = []
    for i in stride(from: 0, to: digits.count, by: 2) {
        guard let byte = UInt8(String(decoding: digits[i..<i + 2], as: UTF8.self), radix: 16) else { return nil }
        bytes.append(byte)
    }
    return bytes
}

// The snippet of `RedisTopicEmitter`'s doc comment, verbatim but for the Redis URL (keep in sync
// with Sources/SwitchboardRedis/RedisTopicEmitter.swift).
func announce(redisURL: String) async throws -> Int {
    let emitter = try RedisTopicEmitter(url: RedisURL(redisURL))
    let receivers = try await emitter.publish(text: "deploy finished\n", to: "ops")
    print("\(receivers) server processes subscribed to it")   // PUBLISH's reply
    await emitter.close()
    return receivers
}
