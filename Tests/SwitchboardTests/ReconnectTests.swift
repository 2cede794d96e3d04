import Foundation
import Testing
@testable import Switchboard
import SwitchboardCore

/// A server that can be stopped and started again on the same port.
private actor RestartableServer {
    private(set) var server: WebSocketServer?
    private(set) var port = 0
    private(set) var generation = 0
    let received = ReceivedLines()

    func start() async throws {
        generation += 1
        let gen = generation
        let server = WebSocketServer(configuration: .init(host: "127.0.0.1", port: port))
        let received = self.received
        server.route("/v1/ws") { connection in
            try? await connection.send(text: "hello from server \(gen)\n")
            for await line in connection.lines() {
                let text = String(decoding: line, as: UTF8.self)
                await received.append("\(gen):\(text)")
                try? await connection.send(text: "echo \(gen) \(text)\n")
            }
        }
        port = try await server.start()
        self.server = server
    }

    func stop() async {
        await server?.shutdown(timeout: .seconds(2))
        server = nil
    }
}

private struct LocalEndpoint: SocketEndpoint {
    var port: Int
    var scheme: SocketScheme { .ws }
    var host: String { "127.0.0.1" }
    var path: String { "/v1/ws" }
}

private struct Text: SocketCommand { var message: String }

private actor StateLog {
    var states: [SocketConnectionState] = []
    func append(_ s: SocketConnectionState) { states.append(s) }

    /// The states once the final `.closed` one has been logged (the log task reads the
    /// adapter's stream asynchronously, so it may lag behind the adapter).
    func untilClosed(timeout: Duration = .seconds(60)) async -> [SocketConnectionState] {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if case .closed? = states.last { break }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return states
    }
}

/// Waits (generously: this only ends a failing run) until the adapter has no connection.
private func waitUntilDisconnected(_ adapter: SocketAdapter) async throws {
    let deadline = ContinuousClock.now + .seconds(60)
    while await adapter.currentConnection != nil, ContinuousClock.now < deadline {
        try await Task.sleep(for: .milliseconds(5))
    }
}

@Suite("Reconnect with backoff")
struct ReconnectTests {
    @Test func backoffCeilingDoublesUpToTheCap() {
        let p = ReconnectPolicy(baseDelay: .milliseconds(500), maxDelay: .seconds(30))
        #expect(p.ceiling(forAttempt: 1) == .milliseconds(500))
        #expect(p.ceiling(forAttempt: 2) == .seconds(1))
        #expect(p.ceiling(forAttempt: 3) == .seconds(2))
        #expect(p.ceiling(forAttempt: 7) == .seconds(30))
        #expect(p.ceiling(forAttempt: 1000) == .seconds(30))
    }

    @Test func fullJitterStaysWithinTheCeiling() {
        let p = ReconnectPolicy(baseDelay: .milliseconds(100), maxDelay: .seconds(1))
        var rng = SecureRandom()
        var distinct = Set<Duration>()
        for attempt in 1...8 {
            for _ in 0..<50 {
                let d = p.delay(forAttempt: attempt, using: &rng)
                #expect(d >= .zero && d <= p.ceiling(forAttempt: attempt))
                distinct.insert(d)
            }
        }
        #expect(distinct.count > 100, "delays should be randomized")
    }

    @Test func onlyTransientFailuresAreRetried() {
        for code: UInt16 in [1001, 1006, 1011, 1012, 1013] {
            #expect(ReconnectPolicy.isTransient(closeCode: WebSocketCloseCode(rawValue: code), error: nil))
        }
        for code: UInt16 in [1000, 1002, 1003, 1007, 1008, 1009, 4000] {
            #expect(!ReconnectPolicy.isTransient(closeCode: WebSocketCloseCode(rawValue: code), error: nil))
        }
        #expect(!ReconnectPolicy.isTransient(closeCode: nil, error: .handshakeRejected(status: 401, body: "")))
        #expect(!ReconnectPolicy.isTransient(closeCode: nil, error: .handshakeRejected(status: 403, body: "")))
        #expect(ReconnectPolicy.isTransient(closeCode: nil, error: .handshakeRejected(status: 503, body: "")))
        // A proxy that could not reach the server may later; refused credentials and pin
        // mismatches stay refused.
        #expect(ReconnectPolicy.isTransient(closeCode: nil, error: .proxy("could not open a tunnel", status: 502)))
        #expect(!ReconnectPolicy.isTransient(closeCode: nil, error: .proxy("requires authentication", status: 407)))
        #expect(!ReconnectPolicy.isTransient(closeCode: nil, error: .proxy("refused a tunnel", status: 403)))
        #expect(!ReconnectPolicy.isTransient(closeCode: nil, error: .tls(TLSError(message: "pinning", unpinnedPublicKeys: []))))
        #expect(ReconnectPolicy.isTransient(closeCode: nil, error: .connect(SocketError(errno: ECONNREFUSED, operation: "connect"), address: "x")))
        #expect(!ReconnectPolicy.isTransient(closeCode: nil, error: .tls("bad certificate")))
    }

    @Test func lineStreamSurvivesAServerRestartAndTheHookResendsSetUp() async throws {
        let server = RestartableServer()
        try await server.start()
        let port = await server.port
        let adapter = SocketAdapter(reconnect: ReconnectPolicy(baseDelay: .milliseconds(20), maxDelay: .milliseconds(200)))
        let log = StateLog()
        let statesTask = Task { for await s in adapter.states { await log.append(s) } }
        await adapter.onReconnect { a in try await a.send(command: Text(message: "join again")) }
        let lines = try await adapter.connect(to: LocalEndpoint(port: port))
        var iterator = lines.makeAsyncIterator()
        #expect(await iterator.next().map { String(decoding: $0, as: UTF8.self) } == "hello from server 1")
        try await adapter.send(command: Text(message: "first"))
        #expect(await iterator.next().map { String(decoding: $0, as: UTF8.self) } == "echo 1 first")

        await server.stop()                       // clients get 1001: transient
        try await server.start()                  // same port

        // The stream does not finish: the next lines come from the second server.
        #expect(await iterator.next().map { String(decoding: $0, as: UTF8.self) } == "hello from server 2")
        #expect(await iterator.next().map { String(decoding: $0, as: UTF8.self) } == "echo 2 join again")
        try await adapter.send(command: Text(message: "second"))
        #expect(await iterator.next().map { String(decoding: $0, as: UTF8.self) } == "echo 2 second")

        await adapter.close()
        #expect(await iterator.next() == nil)
        let received = await server.received.lines
        #expect(received == ["1:first", "2:join again", "2:second"])
        await server.stop()
        let states = await log.untilClosed()
        statesTask.cancel()
        #expect(states.first == .connecting)
        #expect(states.contains { if case .reconnecting(attempt: 1, _) = $0 { true } else { false } })
        #expect(states.filter { $0 == .connected }.count == 2)
        if case .closed = states.last {} else { Issue.record("last state should be closed: \(states)") }
    }

    @Test func policyViolationCloseIsNotRetried() async throws {
        let server = WebSocketServer()
        server.route("/v1/ws") { connection in
            await connection.close(code: .policyViolation, reason: "go away")
        }
        let port = try await server.start()
        let adapter = SocketAdapter(reconnect: ReconnectPolicy(baseDelay: .milliseconds(10)))
        let lines = try await adapter.connect(to: LocalEndpoint(port: port))
        for await _ in lines {}
        #expect(await adapter.closeStatus?.code == .policyViolation)
        await #expect(throws: SwitchboardError.self) { try await adapter.send(command: Text(message: "x")) }
        await server.shutdown(timeout: .seconds(1))
    }

    @Test func commandsSentWhileDisconnectedAreQueuedAndFlushedInOrder() async throws {
        let server = RestartableServer()
        try await server.start()
        let port = await server.port
        let adapter = SocketAdapter(reconnect: ReconnectPolicy(baseDelay: .milliseconds(300), maxDelay: .milliseconds(300),
                                                               whileDisconnected: .queue(maxCommands: 2)))
        let lines = try await adapter.connect(to: LocalEndpoint(port: port))
        var iterator = lines.makeAsyncIterator()
        _ = await iterator.next()                              // hello from server 1
        await server.stop()
        // Wait until the adapter noticed the loss (its reconnects fail while the server is down).
        try await waitUntilDisconnected(adapter)
        #expect(await adapter.currentConnection == nil)
        try await adapter.send(command: Text(message: "q1"))
        try await adapter.send(command: Text(message: "q2"))
        await #expect(throws: SwitchboardError.self) { try await adapter.send(command: Text(message: "q3")) }
        try await server.start()
        #expect(await iterator.next().map { String(decoding: $0, as: UTF8.self) } == "hello from server 2")
        #expect(await iterator.next().map { String(decoding: $0, as: UTF8.self) } == "echo 2 q1")
        #expect(await iterator.next().map { String(decoding: $0, as: UTF8.self) } == "echo 2 q2")
        await adapter.close()
        await server.stop()
    }

    @Test func failFastWhileDisconnectedThrowsNotConnected() async throws {
        let server = RestartableServer()
        try await server.start()
        let port = await server.port
        let adapter = SocketAdapter(reconnect: ReconnectPolicy(baseDelay: .seconds(5), maxDelay: .seconds(5)))
        let lines = try await adapter.connect(to: LocalEndpoint(port: port))
        var iterator = lines.makeAsyncIterator()
        _ = await iterator.next()
        await server.stop()
        try await waitUntilDisconnected(adapter)
        #expect(await adapter.currentConnection == nil)
        do {
            try await adapter.send(command: Text(message: "lost?"))
            Issue.record("send while disconnected should throw")
        } catch {
            #expect(error.kind == .notConnected)
        }
        await adapter.close()                                   // stops the pending reconnect
        #expect(await iterator.next() == nil)
    }

    @Test func givesUpAfterMaxAttempts() async throws {
        let server = RestartableServer()
        try await server.start()
        let port = await server.port
        let adapter = SocketAdapter(reconnect: ReconnectPolicy(baseDelay: .milliseconds(5), maxDelay: .milliseconds(10),
                                                               maxAttempts: 3))
        let log = StateLog()
        let statesTask = Task { for await s in adapter.states { await log.append(s) } }
        let lines = try await adapter.connect(to: LocalEndpoint(port: port))
        await server.stop()                                     // and never comes back
        for await _ in lines {}
        let states = await log.untilClosed()
        statesTask.cancel()
        let attempts = states.compactMap { if case .reconnecting(let a, _) = $0 { a } else { nil } }
        #expect(attempts == [1, 2, 3])
        if case .closed(_, _, let error) = states.last {
            #expect(error?.kind == .connect)
        } else {
            Issue.record("expected a final closed state: \(states)")
        }
    }
}

@Suite("Keepalive and dead-peer detection")
struct KeepaliveTests {
    /// A server pinging every `pingInterval` whose route stores its connection in `serverSide`,
    /// and an adapter connected to it; both are closed after `body`.
    private func withPingingServer(pingInterval: Duration,
                                   _ body: (ConnectionBox, SocketAdapter) async throws -> Void) async throws {
        var config = WebSocketServerConfiguration()
        config.connection.pingInterval = pingInterval
        let server = WebSocketServer(configuration: config)
        let serverSide = ConnectionBox()
        server.route("/v1/ws") { connection in
            await serverSide.set(connection)
            for await _ in connection.messages() {}
        }
        let port = try await server.start()
        let adapter = SocketAdapter()
        let lines = try await adapter.connect(to: LocalEndpoint(port: port))
        _ = lines
        try await body(serverSide, adapter)
        await adapter.close()
        await server.shutdown(timeout: .seconds(1))
    }

    @Test func keepalivePingsMeasureRoundTrip() async throws {
        try await withPingingServer(pingInterval: .milliseconds(50)) { serverSide, _ in
            var rtt: Duration?
            let deadline = ContinuousClock.now + .seconds(60)       // ends a failing run only
            while ContinuousClock.now < deadline {
                if let c = await serverSide.connection, let r = await c.lastPingRoundTrip { rtt = r; break }
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(rtt != nil, "server never measured a ping round trip")
            if let rtt { #expect(rtt >= .zero && rtt < .seconds(60), "implausible round trip \(rtt)") }
            #expect(await serverSide.connection?.isOpen == true)
        }
    }

    /// Before any ping is answered there is no round trip (stored as -1 ns: nil, not a value).
    @Test func noRoundTripBeforeAPingIsAnswered() async throws {
        try await withPingingServer(pingInterval: .seconds(600)) { serverSide, adapter in
            var connection: WebSocketConnection?
            while connection == nil {  // the route stores it once it runs
                connection = await serverSide.connection
                if connection == nil { try await Task.sleep(for: .milliseconds(5)) }
            }
            #expect(await connection?.lastPingRoundTrip == nil)
            #expect(await adapter.lastPingRoundTrip == nil)
        }
    }

    @Test func deadPeerIsClosedWith1011AfterPongTimeout() async throws {
        var config = WebSocketServerConfiguration()
        config.connection.pingInterval = .milliseconds(50)
        config.connection.pongTimeout = .milliseconds(150)
        config.connection.closeTimeout = .milliseconds(300)
        let server = WebSocketServer(configuration: config)
        let serverSide = ConnectionBox()
        server.route("/v1/ws") { connection in
            await serverSide.set(connection)
            for await _ in connection.messages() {}
        }
        let port = try await server.start()
        // A peer that completes the handshake and then never answers anything.
        let closeCode = try await onServerTestThread { () -> Int? in
            let raw = try ServerRawSocket(port: port)
            try raw.handshake(path: "/v1/ws")
            while true {
                let frame = try raw.readFrame()
                if frame.opcode == 0x8 { return frame.closeCode }
            }
        }
        #expect(closeCode == 1011)
        var error: SwitchboardError?
        let deadline = ContinuousClock.now + .seconds(60)       // ends a failing run only
        while ContinuousClock.now < deadline {
            if let c = await serverSide.connection, await !c.isOpen { error = await c.error; break }
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(error?.kind == .timedOut)
        await server.shutdown(timeout: .seconds(1))
    }
}

actor ConnectionBox {
    var connection: WebSocketConnection?
    func set(_ c: WebSocketConnection) { connection = c }
}
