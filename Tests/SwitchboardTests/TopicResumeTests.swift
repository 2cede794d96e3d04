import Foundation
import Synchronization
import Testing
@testable import Switchboard
import SwitchboardCore
import SwitchboardTestSupport

/// `WebSocketServer.subscribe(_:to:resumingAfter:announce:)`: numbered topics with a bounded
/// replay buffer. A subscriber that lost its connection gets exactly what it missed, then the
/// live messages; or it is told that it could not.
@Suite struct TopicResumeTests {
    /// Every message is stamped `EPOCH SEQ body`.
    static func replay(maxMessages: Int = 100, maxAge: Duration = .seconds(120)) -> TopicReplayConfiguration {
        TopicReplayConfiguration(maxMessages: maxMessages, maxAge: maxAge) { position, message in
            guard case .text(let body) = message else { return message }
            return .text(Array("\(position.epoch) \(position.sequence) ".utf8) + body)
        }
    }

    /// A server whose route subscribes to `t`, resuming after the query's `epoch` and `seq` when
    /// given, and first tells the client `status OUTCOME from REQUESTED now EPOCH SEQ`.
    static func start(_ replay: TopicReplayConfiguration, backplane: (any TopicBackplane)? = nil) async throws -> (WebSocketServer, Int) {
        var config = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        config.loopCount = 2
        config.topicReplay = replay
        config.backplane = backplane
        let server = WebSocketServer(configuration: config)
        server.route("/") { [server] c in
            let query = c.request?.head.queryItems ?? []
            let epoch = query.first { $0.name == "epoch" }?.value
            let sequence = query.first { $0.name == "seq" }.flatMap { UInt64($0.value) }
            let requested = epoch.flatMap { e in sequence.map { TopicPosition(epoch: e, sequence: $0) } }
            do {
                try await server.subscribe(c, to: "t", resumingAfter: requested) { subscription in
                    let outcome = switch subscription.outcome {
                    case .new: "new"
                    case .recovered(let count): "recovered:\(count)"
                    case .failed(let reason): "failed:\(reason.rawValue)"
                    }
                    let from = requested.map { "\($0.sequence)" } ?? "-"
                    return .text(Array("status \(outcome) from \(from) now \(subscription.position.epoch) \(subscription.position.sequence)\n".utf8))
                }
            } catch {
                return
            }
            for await _ in c.lines() {}
        }
        return (server, try await server.start())
    }

    /// A line the client received.
    enum Line: Equatable {
        case status(outcome: String, from: UInt64?, epoch: String, sequence: UInt64)
        case message(epoch: String, sequence: UInt64, body: String)

        init?(_ data: Data) {
            let parts = String(decoding: data, as: UTF8.self).split(separator: " ", maxSplits: 2).map(String.init)
            if parts.first == "status" {
                let words = String(decoding: data, as: UTF8.self).split(separator: " ").map(String.init)
                guard words.count == 7, let sequence = UInt64(words[6]) else { return nil }
                self = .status(outcome: words[1], from: UInt64(words[3]), epoch: words[5], sequence: sequence)
            } else {
                guard parts.count == 3, let sequence = UInt64(parts[1]) else { return nil }
                self = .message(epoch: parts[0], sequence: sequence, body: parts[2])
            }
        }
    }

    struct Endpoint: SocketEndpoint {
        var port: Int
        var position: TopicPosition?
        var scheme: SocketScheme { .ws }
        var host: String { "127.0.0.1" }
        var queryItems: [(name: String, value: String)] {
            guard let position else { return [] }
            return [("epoch", position.epoch), ("seq", String(position.sequence))]
        }
    }

    /// One connection to `port` (no reconnection), resuming after `position`.
    static func connect(_ port: Int, after position: TopicPosition?) async throws -> (SocketAdapter, AsyncStream<Data>.AsyncIterator) {
        let adapter = SocketAdapter()
        let lines = try await adapter.connect(to: Endpoint(port: port, position: position))
        return (adapter, lines.makeAsyncIterator())
    }

    static func next(_ lines: inout AsyncStream<Data>.AsyncIterator) async -> Line? {
        guard let data = await lines.next() else { return nil }
        return Line(data)
    }

    /// The client is cut off (a relay drops its TCP connection) every 40 messages while the
    /// server publishes 400; it reconnects by itself, each time asking for what came after the
    /// last message it received. Every connection starts exactly after the position it asked
    /// for, with no gap and no duplicate, and the client ends with every message once, in order.
    @Test(.timeLimit(.minutes(3)))
    func aClientCutOffRepeatedlyGetsEveryMessageOnceInOrder() async throws {
        let total = 400
        let (server, port) = try await Self.start(Self.replay(maxMessages: 1_000))
        let relay = try TCPRelay(targetPort: port)
        defer { relay.stop() }
        let position = Locked<TopicPosition?>(nil)
        let received = Atomic<Int>(0)
        let adapter = SocketAdapter(reconnect: ReconnectPolicy(baseDelay: .milliseconds(5), maxDelay: .milliseconds(20)))
        var lines = try await adapter.connect(resolving: {
            Endpoint(port: relay.port, position: position.withLock { $0 })
        }).makeAsyncIterator()
        // The first status line: subscribed, live from here.
        guard case .status("new", nil, let epoch, 0)? = await Self.next(&lines) else {
            Issue.record("no status line first")
            return
        }
        position.withLock { $0 = TopicPosition(epoch: epoch, sequence: 0) }
        // The publisher stays at most 20 messages ahead of the client: fewer than the 40 between
        // cuts, so each cut falls on the newest connection, once it is subscribed.
        let publisher = Task {
            for i in 1...total {
                while received.load(ordering: .relaxed) < i - 20 { try await Task.sleep(for: .milliseconds(1)) }
                _ = await server.publish(text: "m\(i)\n", to: "t")
            }
        }
        var bodies: [String] = []
        var expectedNext: UInt64?   // within one connection: the next sequence number it must send
        var statuses: [String] = []
        var duplicates = 0
        while bodies.count < total, let line = await Self.next(&lines) {
            switch line {
            case .status(let outcome, let from, let e, _):
                #expect(e == epoch)
                statuses.append(outcome)
                expectedNext = from.map { $0 + 1 }
            case .message(let e, let sequence, let body):
                #expect(e == epoch)
                if let expected = expectedNext {
                    #expect(sequence == expected, "a gap or a duplicate within a connection")
                }
                expectedNext = sequence + 1
                // Lines of a dropped connection still buffered when the next one asked may come
                // again from the history: the position tells them apart.
                let last = position.withLock { $0?.sequence ?? 0 }
                guard sequence > last else {
                    duplicates += 1
                    continue
                }
                #expect(sequence == last + 1, "a message was skipped")
                position.withLock { $0 = TopicPosition(epoch: e, sequence: sequence) }
                bodies.append(body)
                received.store(bodies.count, ordering: .relaxed)
                if bodies.count % 40 == 0 && bodies.count < total { relay.cutAll() }
            }
        }
        try await publisher.value
        #expect(bodies == (1...total).map { "m\($0)" })
        #expect(relay.cutCount == total / 40 - 1)
        #expect(statuses.count == relay.cutCount)   // one per reconnection (the first was read above)
        #expect(statuses.allSatisfy { $0.hasPrefix("recovered:") }, "\(statuses)")
        let stats = server.statistics
        #expect(stats.topicResumesRecovered == statuses.count)
        #expect(stats.topicResumesFailed == 0)
        #expect(stats.topicHistories == 1)
        await adapter.close()
        await server.shutdown()
        _ = duplicates   // allowed: the client's own buffering, not the server's
    }

    /// Too many messages while away: the outcome says so, none of the history is sent (no
    /// partial replay), and live delivery goes on.
    @Test(.timeLimit(.minutes(2)))
    func recoveryBeyondTheBufferIsReportedNotSkipped() async throws {
        let (server, port) = try await Self.start(Self.replay(maxMessages: 5))
        var (adapter, lines) = try await Self.connect(port, after: nil)
        guard case .status("new", nil, let epoch, 0)? = await Self.next(&lines) else {
            Issue.record("no status line")
            return
        }
        #expect(await server.publish(text: "m1\n", to: "t") == 1)
        #expect(await Self.next(&lines) == .message(epoch: epoch, sequence: 1, body: "m1"))
        await adapter.close()
        try await waitUntil { server.subscriberCount(of: "t") == 0 }
        for i in 2...8 { #expect(await server.publish(text: "m\(i)\n", to: "t") == 0) }   // kept: 4…8

        // From 1: message 2 is gone.
        (adapter, lines) = try await Self.connect(port, after: TopicPosition(epoch: epoch, sequence: 1))
        #expect(await Self.next(&lines) == .status(outcome: "failed:buffer_exceeded", from: 1, epoch: epoch, sequence: 8))
        #expect(await server.publish(text: "m9\n", to: "t") == 1)
        #expect(await Self.next(&lines) == .message(epoch: epoch, sequence: 9, body: "m9"))
        await adapter.close()
        try await waitUntil { server.subscriberCount(of: "t") == 0 }

        // From 4: 5…9 are all kept, and come first.
        (adapter, lines) = try await Self.connect(port, after: TopicPosition(epoch: epoch, sequence: 4))
        #expect(await Self.next(&lines) == .status(outcome: "recovered:5", from: 4, epoch: epoch, sequence: 9))
        for s in 5...9 { #expect(await Self.next(&lines) == .message(epoch: epoch, sequence: UInt64(s), body: "m\(s)")) }
        await adapter.close()

        let stats = server.statistics
        #expect(stats.topicResumesFailed == 1 && stats.topicResumesRecovered == 1)
        #expect(stats.topicHistories == 1 && stats.topicHistoryBytes > 0)
        await server.shutdown()
    }

    /// A position from a server that restarted names another epoch; one ahead of the newest
    /// message was never handed out. Both are refused, and live delivery still starts.
    @Test(.timeLimit(.minutes(2)))
    func positionsFromARestartedServerOrFromNowhereAreRefused() async throws {
        let (first, firstPort) = try await Self.start(Self.replay())
        var (adapter, lines) = try await Self.connect(firstPort, after: nil)
        guard case .status("new", nil, let oldEpoch, 0)? = await Self.next(&lines) else {
            Issue.record("no status line")
            return
        }
        #expect(await first.publish(text: "m1\n", to: "t") == 1)
        #expect(await Self.next(&lines) == .message(epoch: oldEpoch, sequence: 1, body: "m1"))
        await adapter.close()
        await first.shutdown()

        let (second, port) = try await Self.start(Self.replay())
        #expect(await second.publish(text: "n1\n", to: "t") == 0)
        let newEpoch = try #require(second.position(of: "t")?.epoch)
        #expect(newEpoch != oldEpoch)
        (adapter, lines) = try await Self.connect(port, after: TopicPosition(epoch: oldEpoch, sequence: 1))
        #expect(await Self.next(&lines) == .status(outcome: "failed:epoch_changed", from: 1, epoch: newEpoch, sequence: 1))
        #expect(await second.publish(text: "n2\n", to: "t") == 1)
        #expect(await Self.next(&lines) == .message(epoch: newEpoch, sequence: 2, body: "n2"))
        await adapter.close()
        try await waitUntil { second.subscriberCount(of: "t") == 0 }

        (adapter, lines) = try await Self.connect(port, after: TopicPosition(epoch: newEpoch, sequence: 99))
        #expect(await Self.next(&lines) == .status(outcome: "failed:unknown_position", from: 99, epoch: newEpoch, sequence: 2))
        await adapter.close()
        #expect(second.statistics.topicResumesFailed == 2)
        await second.shutdown()
    }

    /// A backplane that reports a possible gap starts a new epoch: resuming across it fails.
    @Test(.timeLimit(.minutes(2)))
    func aBackplaneGapStartsANewEpoch() async throws {
        let backplane = RecordingBackplane()
        let (server, port) = try await Self.start(Self.replay(), backplane: backplane)
        var (adapter, lines) = try await Self.connect(port, after: nil)
        guard case .status("new", nil, let epoch, 0)? = await Self.next(&lines) else {
            Issue.record("no status line")
            return
        }
        let receiver = try #require(backplane.receiver.withLock { $0 })
        #expect(receiver.deliver(.text(Array("remote\n".utf8)), to: "t") == 1)
        #expect(await Self.next(&lines) == .message(epoch: epoch, sequence: 1, body: "remote"))
        await adapter.close()
        try await waitUntil { server.subscriberCount(of: "t") == 0 }

        receiver.reportPossibleGap(in: ["t"])
        let after = try #require(server.position(of: "t"))
        #expect(after.epoch != epoch && after.sequence == 1)
        (adapter, lines) = try await Self.connect(port, after: TopicPosition(epoch: epoch, sequence: 1))
        #expect(await Self.next(&lines) == .status(outcome: "failed:epoch_changed", from: 1, epoch: after.epoch, sequence: 1))
        #expect(await server.publish(text: "local\n", to: "t") == 1)
        #expect(await Self.next(&lines) == .message(epoch: after.epoch, sequence: 2, body: "local"))
        #expect(backplane.published.withLock { $0 } == ["local\n"])   // unstamped: each process numbers its own
        await adapter.close()
        await server.shutdown()
    }

    /// Once every message has aged out and nobody subscribes, the topic's history is forgotten:
    /// an idle topic costs nothing, and a position from before is refused as from another epoch.
    @Test(.timeLimit(.minutes(2)))
    func idleTopicsAreForgotten() async throws {
        let (server, port) = try await Self.start(Self.replay(maxAge: .milliseconds(200)))
        #expect(await server.publish(text: "m1\n", to: "t") == 0)
        #expect(await server.publish(text: "m1\n", to: "u") == 0)
        let old = try #require(server.position(of: "t"))
        #expect(server.statistics.topicHistories == 2)
        try await waitUntil { server.statistics.topicHistories == 0 }
        #expect(server.position(of: "t") == nil)
        #expect(server.statistics.topicHistoryBytes == 0)
        let (adapter, lines) = try await Self.connect(port, after: old)
        var iterator = lines
        guard case .status("failed:epoch_changed", 1, let epoch, 0)? = await Self.next(&iterator) else {
            Issue.record("not refused as another epoch")
            return
        }
        #expect(epoch != old.epoch)
        await adapter.close()
        await server.shutdown()
    }

    @Test func resumingWithoutAReplayConfigurationIsAnError() async throws {
        let server = WebSocketServer(configuration: .init(host: "127.0.0.1", port: 0))
        let failure = Locked<String?>(nil)
        server.route("/") { [server] c in
            do {
                try await server.subscribe(c, to: "t", resumingAfter: nil)
            } catch {
                failure.withLock { $0 = "\(error)" }
            }
            try? await c.send(text: "done\n")
        }
        let port = try await server.start()
        var (adapter, lines) = try await Self.connect(port, after: nil)
        #expect(await lines.next() == Data("done".utf8))
        #expect(failure.withLock { $0 }?.contains("topicReplay") == true)
        #expect(server.position(of: "t") == nil)
        await adapter.close()
        await server.shutdown()
    }

    /// Polls a condition the server reaches by itself (a close noticed, a sweep done).
    func waitUntil(_ condition: () -> Bool) async throws {
        while !condition() { try await Task.sleep(for: .milliseconds(5)) }
    }
}

/// A backplane that keeps what it was given.
final class RecordingBackplane: TopicBackplane {
    let receiver = Locked<TopicBackplaneReceiver?>(nil)
    let published = Locked<[String]>([])
    func attach(_ receiver: TopicBackplaneReceiver) { self.receiver.withLock { $0 = receiver } }
    func topicActivated(_ topic: String) {}
    func topicDeactivated(_ topic: String) {}
    func publish(_ message: WebSocketMessage, to topic: String, compress: Bool) {
        guard case .text(let bytes) = message else { return }
        published.withLock { $0.append(String(decoding: bytes, as: UTF8.self)) }
    }
    func waitUntilReceiving(_ topic: String) async -> Bool { true }
    func detach() async {}
}
