import Foundation
import Testing
@testable import Switchboard
import SwitchboardCore

/// `subscribeCatchingUp`: what a subscriber missed (from the application's store) and the live
/// publications join with no gap, no duplicate and no reordering.
@Suite struct TopicCatchUpTests {
    /// A store that every publish goes through first (as a chat persists before broadcasting).
    final class Store: Sendable {
        let ids = Locked<[Int]>([])
        func after(_ id: Int) -> [Int] { ids.withLock { $0.filter { $0 > id } } }
    }

    /// The handler's steps, told to the test; and the test's go-ahead, told to the handler.
    struct Gates: Sendable {
        let events: AsyncStream<String>
        let eventsIn: AsyncStream<String>.Continuation
        let go: AsyncStream<Void>
        let goIn: AsyncStream<Void>.Continuation
        init() {
            (events, eventsIn) = AsyncStream.makeStream()
            (go, goIn) = AsyncStream.makeStream()
        }
    }

    static func line(_ id: Int) -> String { "m \(id)\n" }
    static func id(in payload: [UInt8]) -> Int? {
        let text = String(decoding: payload, as: UTF8.self)
        guard text.hasPrefix("m ") else { return nil }
        return Int(text.dropFirst(2).trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// A server whose route catches `t` up from the client's first line (`since N`).
    static func start(store: Store, gates: Gates, outboundLimit: Int? = nil) async throws -> (WebSocketServer, Int) {
        var config = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        config.loopCount = 2
        if let outboundLimit { config.connection.outboundLimit = outboundLimit }
        let server = WebSocketServer(configuration: config)
        server.route("/") { [server] c in
            var lines = c.lines().makeAsyncIterator()
            guard let first = await lines.next(),
                  let since = Int(String(decoding: first, as: UTF8.self).dropFirst("since ".count)) else { return }
            let catchUp = await server.subscribeCatchingUp(c, to: "t")
            gates.eventsIn.yield("subscribed")
            var go = gates.go.makeAsyncIterator()
            _ = await go.next()
            let missed = store.after(since)
            let newest = missed.last ?? since
            do {
                try await catchUp.finish(sending: .text(Array("history \(missed.map(String.init).joined(separator: ","))\n".utf8))) { payload in
                    guard let id = Self.id(in: payload) else { return .deliver }
                    return id <= newest ? .skip : .deliverAndStopFiltering
                }
                gates.eventsIn.yield("finished")
            } catch {
                gates.eventsIn.yield("finish failed: \(error)")
            }
            while await lines.next() != nil {}
        }
        return (server, try await server.start())
    }

    static func publish(_ id: Int, _ server: WebSocketServer, _ store: Store) async -> Int {
        store.ids.withLock { $0.append(id) }
        return await server.publish(text: line(id), to: "t")
    }

    @Test(.timeLimit(.minutes(2)))
    func heldPublicationsFollowTheHistoryWithoutDuplicates() async throws {
        let store = Store(), gates = Gates()
        let (server, port) = try await Self.start(store: store, gates: gates)
        for id in 1...3 { #expect(await Self.publish(id, server, store) == 0) }   // nobody subscribed yet
        let socket = SocketAdapter()
        var lines = try await socket.connect(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/")).makeAsyncIterator()
        try await socket.send(text: "since 1\n")
        var events = gates.events.makeAsyncIterator()
        #expect(await events.next() == "subscribed")
        // Published after the subscription, before the store is read: held, and in the history too.
        for id in 4...5 { #expect(await Self.publish(id, server, store) == 1) }
        gates.goIn.yield()
        #expect(await events.next() == "finished")
        // A message the history holds that reaches this node late (another process's publish
        // arriving after the store read): skipped; the next new one passes and ends filtering.
        #expect(await Self.publish(5, server, store) == 0)
        #expect(await Self.publish(6, server, store) == 1)
        #expect(await Self.publish(7, server, store) == 1)
        var received: [String] = []
        while received.count < 3, let line = await lines.next() { received.append(String(decoding: line, as: UTF8.self)) }
        #expect(received == ["history 2,3,4,5", "m 6", "m 7"])
        await socket.close()
        await server.shutdown()
    }

    /// Two catch-ups of one topic on one connection overlapping (a chat sender waiting for its
    /// message's confirmation while a pub/sub recovery of its room begins): a publication held
    /// by the first is not lost when the second ends with nothing to send. (It was dropped: the
    /// sender's own echo never came.)
    @Test(.timeLimit(.minutes(2)))
    func aPublicationHeldByAnEarlierCatchUpSurvivesALaterOne() async throws {
        let gates = Gates()
        var config = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        config.loopCount = 2
        let server = WebSocketServer(configuration: config)
        server.route("/") { [server] c in
            var go = gates.go.makeAsyncIterator()
            let first = await server.subscribeCatchingUp(c, to: "t")
            gates.eventsIn.yield("first")
            _ = await go.next()
            let second = await server.subscribeCatchingUp(c, to: "t")
            gates.eventsIn.yield("second")
            _ = await go.next()
            await second.cancel()
            await first.cancel()
            gates.eventsIn.yield("done")
            for await _ in c.lines() {}
        }
        let port = try await server.start()
        let socket = SocketAdapter()
        var lines = try await socket.connect(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/")).makeAsyncIterator()
        var events = gates.events.makeAsyncIterator()
        #expect(await events.next() == "first")
        #expect(await server.publish(text: Self.line(1), to: "t") == 1)
        gates.goIn.yield()
        #expect(await events.next() == "second")
        #expect(await server.publish(text: Self.line(2), to: "t") == 1)
        gates.goIn.yield()
        #expect(await events.next() == "done")
        #expect(await server.publish(text: Self.line(3), to: "t") == 1)
        var received: [String] = []
        while let line = await lines.next() {
            received.append(String(decoding: line, as: UTF8.self))
            if received.last == "m 3" { break }
        }
        #expect(received == ["m 1", "m 2", "m 3"])
        await socket.close()
        await server.shutdown()
    }

    @Test(.timeLimit(.minutes(2)))
    func publicationsHeldBeyondTheOutboundLimitCloseTheSubscriberWith1013() async throws {
        let store = Store(), gates = Gates()
        let (server, port) = try await Self.start(store: store, gates: gates, outboundLimit: 64 << 10)
        let socket = SocketAdapter()
        var lines = try await socket.connect(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/")).makeAsyncIterator()
        try await socket.send(text: "since 0\n")
        var events = gates.events.makeAsyncIterator()
        #expect(await events.next() == "subscribed")
        // 100 KiB held while the application never finishes: over the 64 KiB limit.
        let big = String(repeating: "x", count: 1024)
        var queued = 0
        for _ in 0..<100 { queued += await server.publish(text: big + "\n", to: "t") }
        #expect(queued < 100, "held until over the limit, then the subscriber is closed")
        while await lines.next() != nil {}
        #expect(await socket.closeStatus?.code == .tryAgainLater)
        #expect(server.statistics.slowConsumersClosed == 1)
        gates.goIn.yield()
        #expect(await events.next()?.hasPrefix("finish failed") == true)
        await server.shutdown()
    }
}
