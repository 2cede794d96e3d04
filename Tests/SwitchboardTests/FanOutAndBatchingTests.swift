import Foundation
import Testing
@testable import Switchboard
import SwitchboardCore

/// Issue 13's paths: publishing across loops and from callbacks, batched lines, batched commands.
@Suite struct FanOutAndBatchingTests {
    static func server(loops: Int = 1) -> WebSocketServer {
        var config = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        config.loopCount = loops
        return WebSocketServer(configuration: config)
    }

    static func url(_ port: Int, _ path: String = "/") throws -> WebSocketURLEndpoint {
        try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)\(path)")
    }

    @Test(.timeLimit(.minutes(2)))
    func publishReachesSubscribersOnEveryLoopButTheExcludedOne() async throws {
        let server = Self.server(loops: 2)
        let connections = Locked<[WebSocketConnection]>([])
        server.route("/") { [server] c in
            server.subscribe(c, to: "room")
            connections.withLock { $0.append(c) }
            for await _ in c.messages() {}
        }
        let port = try await server.start()
        var sockets: [SocketAdapter] = []
        var streams: [AsyncStream<WebSocketMessage>] = []
        for _ in 0..<4 {
            let socket = SocketAdapter()
            streams.append(try await socket.connectMessages(to: try Self.url(port)))
            sockets.append(socket)
        }
        #expect(await serverEventually { server.subscriberCount(of: "room") == 4 })
        let subscribed = connections.withLock { $0 }
        // The premise: the subscribers are spread over both loops (the group hands out loops in turn).
        #expect(Set(subscribed.map { ObjectIdentifier($0.loop) }).count == 2)
        let excluded = try #require(subscribed.first)
        #expect(await server.publish(text: "to all but one", to: "room", excluding: excluded) == 3)
        #expect(await server.publish(text: "to all", to: "room") == 4)
        var excludedSaw: [WebSocketMessage] = []
        var othersSaw = 0
        for stream in streams {
            var iterator = stream.makeAsyncIterator()
            let first = await iterator.next()
            if first == .text(Array("to all".utf8)) {
                excludedSaw.append(first ?? .binary([]))
            } else {
                #expect(first == .text(Array("to all but one".utf8)))
                #expect(await iterator.next() == .text(Array("to all".utf8)))
                othersSaw += 1
            }
        }
        #expect(othersSaw == 3)
        #expect(excludedSaw.count == 1)
        for socket in sockets { await socket.close() }
        // Closed connections leave their topics (the server's close hook).
        #expect(await serverEventually { server.subscriberCount(of: "room") == 0 })
        #expect(server.statistics.openConnections == 0)
        await server.shutdown()
    }

    @Test(.timeLimit(.minutes(2)))
    func callbackRoutesPublishWithoutWaiting() async throws {
        let server = Self.server(loops: 2)
        let counts = Locked<[Int]>([])
        server.route("/", callbacks: WebSocketCallbacks(onOpen: { [server] c in
            server.subscribe(c, to: "room")
        }, onMessage: { [server] c, message in
            let n = server.publishNow(message, to: "room", excluding: c)
            counts.withLock { $0.append(n) }
        }))
        let port = try await server.start()
        var sockets: [SocketAdapter] = []
        var iterators: [AsyncStream<WebSocketMessage>.AsyncIterator] = []
        for _ in 0..<3 {
            let socket = SocketAdapter()
            iterators.append(try await socket.connectMessages(to: try Self.url(port)).makeAsyncIterator())
            sockets.append(socket)
        }
        #expect(await serverEventually { server.subscriberCount(of: "room") == 3 })
        try await sockets[0].send(text: "from 0")
        #expect(await iterators[1].next() == .text(Array("from 0".utf8)))
        #expect(await iterators[2].next() == .text(Array("from 0".utf8)))
        try await sockets[1].send(text: "from 1")
        // The sender was excluded: the first thing socket 0 receives is socket 1's message.
        #expect(await iterators[0].next() == .text(Array("from 1".utf8)))
        #expect(await iterators[2].next() == .text(Array("from 1".utf8)))
        // Counted on this loop plus handed to the other loop's subscribers.
        #expect(counts.withLock { $0 } == [2, 2])
        #expect(server.publishNow(.text([0xC3, 0x28]), to: "room") == 0)    // not UTF-8: nowhere
        for socket in sockets { await socket.close() }
        await server.shutdown()
    }

    @Test(.timeLimit(.minutes(2)))
    func linesOfOneLargeMessageComeInOrderAcrossBatches() async throws {
        let count = LineReader.batchLimit * 3 + 7
        let server = Self.server()
        server.route("/") { c in
            let text = (0..<count).map { "line \($0)\n" }.joined()
            try? await c.send(text: text)
            for await _ in c.messages() {}
        }
        let port = try await server.start()
        let socket = SocketAdapter()
        let lines = try await socket.connect(to: try Self.url(port))
        var received: [String] = []
        for await line in lines {
            received.append(String(decoding: line, as: UTF8.self))
            if received.count == count { break }
        }
        #expect(received == (0..<count).map { "line \($0)" })
        await socket.close()
        await server.shutdown()
    }

    @Test(.timeLimit(.minutes(2)))
    func linesBeforeAnOverlongLineAreDeliveredThenTheConnectionFailsWith1009() async throws {
        let server = Self.server()
        server.route("/") { c in
            try? await c.send(text: "one\ntwo\n" + String(repeating: "x", count: 200) + "\nthree\n")
            for await _ in c.messages() {}
        }
        let port = try await server.start()
        var configuration = WebSocketConfiguration()
        configuration.maxLineLength = 100
        let socket = SocketAdapter()
        let lines = try await socket.connect(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/",
                                                                         configuration: configuration))
        var received: [String] = []
        for await line in lines { received.append(String(decoding: line, as: UTF8.self)) }
        #expect(received == ["one", "two"])
        #expect(await socket.closeStatus?.code == .messageTooBig)
        await server.shutdown()
    }

    /// Commands sent back to back from one task take the batched path (and, with a tiny
    /// high-water mark, the waiting path in between): every one arrives, in order.
    @Test(.timeLimit(.minutes(2)), arguments: [1 << 20, 512])
    func commandsSentBackToBackArriveInOrder(highWaterMark: Int) async throws {
        let count = 5_000
        let server = Self.server()
        let received = Locked<[String]>([])
        server.route("/") { c in
            for await line in c.lines() {
                received.withLock { $0.append(String(decoding: line, as: UTF8.self)) }
            }
        }
        let port = try await server.start()
        var configuration = WebSocketConfiguration()
        configuration.outboundHighWaterMark = highWaterMark
        configuration.outboundLowWaterMark = highWaterMark / 4
        let socket = SocketAdapter()
        _ = try await socket.connect(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/",
                                                                 configuration: configuration))
        struct Numbered: SocketCommand { var message: String }
        for i in 0..<count { try await socket.send(command: Numbered(message: "command \(i)")) }
        #expect(await serverEventually { received.withLock { $0.count } == count })
        #expect(received.withLock { $0 } == (0..<count).map { "command \($0)" })
        await socket.close()
        // After the end, sending throws instead of vanishing.
        await #expect(throws: SwitchboardError.self) { try await socket.send(command: Numbered(message: "late")) }
        await server.shutdown()
    }
}
