#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Logging
import Synchronization
import SwitchboardCore
#if MetricsSupport
import CoreMetrics
#endif
#if ServiceLifecycleSupport
import ServiceLifecycle
#endif

/// An embeddable WebSocket server: routes by path, authenticates upgrades, runs one handler
/// task per connection (or callbacks) on the connection's event loop, offers topics, and shuts
/// down gracefully.
///
/// ```swift
/// let server = WebSocketServer(configuration: .init(host: "127.0.0.1", port: 8080))
/// server.route("/v1/ws") { connection in
///     for await message in connection.messages() { try await connection.send(message) }
/// }
/// try await server.run()   // until the task is cancelled, or a ServiceGroup shuts it down
/// ```
///
/// With the `ServiceLifecycleSupport` trait the server is a swift-service-lifecycle `Service`:
/// put it in a `ServiceGroup`, and SIGTERM (or any graceful shutdown of the group) stops it
/// accepting, closes every connection with 1001 and returns from ``run()`` once they are
/// closed (bounded by ``WebSocketServerConfiguration/shutdownTimeout``).
public final class WebSocketServer: Sendable {
    /// What the server was created with.
    public let configuration: WebSocketServerConfiguration
    /// A loopback-bound server answers only to loopback `Host` names (DNS rebinding): decided
    /// once, from the configuration, not on every handshake.
    let refusesNonLoopbackHosts: Bool
    /// What the server and its connections log through (`connection` ids in metadata).
    public let logger: Logger
    let counters: ConnectionCounters
    /// The connection settings, one copy for every connection of this server.
    let sharedConnectionConfiguration: SharedWebSocketConfiguration
    let topics: TopicRegistry
    /// The loops given at init (shared with other users, not shut down by this server).
    private let sharedGroup: EventLoopGroup?

    private struct State {
        var routes: [String: WebSocketRoute] = [:]
        var httpHandler: HTTPHandler?
        var group: EventLoopGroup?
        var listener: Listener?
        var port: Int?
        var connections: [ObjectIdentifier: WebSocketConnection] = [:]
        /// Handler tasks (task routes) not yet returned.
        var runningHandlers = 0
        var phase = Phase.idle
        /// ``listeningPort`` callers waiting for the bind.
        var portWaiters: [CheckedContinuation<Int, any Error>] = []
        /// ``shutdown(timeout:)`` waiting for connections and handlers to finish.
        var drainWaiters: [CheckedContinuation<Void, Never>] = []
        /// ``run()`` waiting for a shutdown request.
        var runWaiter: CheckedContinuation<Void, Never>?
        /// Sockets open per peer address, while ``WebSocketServerConfiguration/maxConnectionsPerAddress``
        /// is on (empty otherwise).
        var connectionsPerAddress = ConnectionsPerAddress()
        /// The counted address of each upgraded connection, while that cap is on (empty otherwise).
        var connectionPeers: [ObjectIdentifier: PeerAddressKey] = [:]
        var shutdownRequested = false

        var drained: Bool { connections.isEmpty && runningHandlers == 0 }

        mutating func takeDrainWaiters() -> [CheckedContinuation<Void, Never>] {
            let w = drainWaiters
            drainWaiters = []
            return w
        }
    }
    private enum Phase { case idle, starting, listening, shuttingDown, stopped }
    private let state = Locked(State())

    #if MetricsSupport
    /// - Parameters:
    ///   - configuration: address, limits, TLS, timeouts.
    ///   - group: event loops to serve on, shared with other users (the server does not shut
    ///     them down); nil (the default) starts `loopCount` loops of its own at ``start()``
    ///     and stops them at shutdown.
    ///   - logger: where the server and its connections log (default label `switchboard.server`).
    ///   - metricsFactory: where metrics go (default: the global `MetricsSystem.factory`, so a
    ///     process that bootstraps a backend before creating the server gets them; tests pass
    ///     their own factory instead). Read once, here.
    public init(configuration: WebSocketServerConfiguration = .init(), group: EventLoopGroup? = nil,
                logger: Logger = Logger(label: "switchboard.server"),
                metricsFactory: any MetricsFactory = MetricsSystem.factory) {
        self.configuration = configuration
        self.refusesNonLoopbackHosts = configuration.refusesNonLoopbackHosts
            && LoopbackHost.isLoopback(bindAddress: configuration.host)
        self.logger = logger
        self.sharedGroup = group
        // No instruments at all while metrics go nowhere (the global factory before a backend is
        // bootstrapped): the hot paths then cost one nil check.
        let metrics = metricsFactory is NOOPMetricsHandler ? nil : ServerMetrics(factory: metricsFactory)
        self.counters = ConnectionCounters(logger: logger, metrics: metrics)
        self.sharedConnectionConfiguration = SharedWebSocketConfiguration(configuration.connection)
        self.topics = TopicRegistry(backplane: configuration.backplane, replay: configuration.topicReplay)
        counters.setCloseHook { [weak self] connection, status in self?.unregister(connection, status: status) }
    }
    #else
    /// - Parameters:
    ///   - configuration: address, limits, TLS, timeouts.
    ///   - group: event loops to serve on, shared with other users (the server does not shut
    ///     them down); nil (the default) starts `loopCount` loops of its own at ``start()``
    ///     and stops them at shutdown.
    ///   - logger: where the server and its connections log (default label `switchboard.server`).
    public init(configuration: WebSocketServerConfiguration = .init(), group: EventLoopGroup? = nil,
                logger: Logger = Logger(label: "switchboard.server")) {
        self.configuration = configuration
        self.refusesNonLoopbackHosts = configuration.refusesNonLoopbackHosts
            && LoopbackHost.isLoopback(bindAddress: configuration.host)
        self.logger = logger
        self.sharedGroup = group
        self.counters = ConnectionCounters(logger: logger)
        self.sharedConnectionConfiguration = SharedWebSocketConfiguration(configuration.connection)
        self.topics = TopicRegistry(backplane: configuration.backplane, replay: configuration.topicReplay)
        counters.setCloseHook { [weak self] connection, status in self?.unregister(connection, status: status) }
    }
    #endif

    // MARK: Set-up

    /// Registers the handler for WebSocket upgrades on `path` (exact match, query ignored;
    /// `"*"` matches every path that has no route of its own).
    /// `authenticate` runs before the upgrade completes and can reject with 401/403.
    /// The handler runs in its own task, isolated to the connection (its parameter is
    /// `isolated`), on the connection's loop: receiving and sending cost no executor hop. Do not
    /// block in it; hand long work to another task.
    ///
    /// When the handler returns, the connection is closed with 1000 (if still open). When it
    /// throws, the error is logged and the connection is closed with 1011 (internal error);
    /// a `CancellationError` (or ``SwitchboardError`` of kind `.cancelled`) closes it with
    /// 1001 (going away) instead.
    ///
    /// `compression: false` declines permessage-deflate on this route even when
    /// ``WebSocketConfiguration/compression`` is set (e.g. a route whose messages mix secrets
    /// with user input).
    public func route(_ path: String, compression: Bool = true,
                      authenticate: (@Sendable (WebSocketUpgradeRequest) async -> WebSocketAuthDecision)? = nil,
                      handler: @escaping @Sendable (isolated WebSocketConnection) async throws -> Void) {
        state.withLock {
            $0.routes[path] = WebSocketRoute(authenticate: authenticate, handler: .task(handler), compression: compression)
        }
    }

    /// Registers callbacks for WebSocket upgrades on `path`: no task per connection (see
    /// ``WebSocketCallbacks``). The lightest and fastest way to serve many connections; the
    /// task form, ``route(_:compression:authenticate:handler:)``, reads more naturally for
    /// conversations. `compression` as for the task form.
    public func route(_ path: String, compression: Bool = true,
                      authenticate: (@Sendable (WebSocketUpgradeRequest) async -> WebSocketAuthDecision)? = nil,
                      callbacks: WebSocketCallbacks) {
        state.withLock {
            $0.routes[path] = WebSocketRoute(authenticate: authenticate, handler: .callbacks(WebSocketCallbacksBox(callbacks)),
                                             compression: compression)
        }
    }

    /// Answers plain HTTP requests (no `Upgrade` header) from their head alone, synchronously
    /// on the event loop; return nil for `404`. The request's body, if any, is not read.
    ///
    /// Shares one slot with ``handleHTTP(_:)``: whichever was set last answers every plain
    /// HTTP request.
    public func onHTTPRequest(_ handler: @escaping @Sendable (HTTPRequestHead) -> HTTPResponse?) {
        state.withLock { $0.httpHandler = .head(handler) }
    }

    /// Answers plain HTTP requests (no `Upgrade` header) asynchronously, with their body; return
    /// nil for `404`.
    ///
    /// The body is read by `Content-Length` up to
    /// ``WebSocketServerConfiguration/maxHTTPBodySize`` before the handler runs (rules in
    /// `HTTPBodyFraming`): above it `413` (`body_too_large`), a `POST`/`PUT`/`PATCH` without a
    /// length or any `Transfer-Encoding` (chunked bodies are not read) `411`
    /// (`length_required`), a malformed or conflicting length `400` (`bad_request`); the
    /// handler is not called then. `GET`, `HEAD`, `DELETE`, `OPTIONS` without a length have an
    /// empty body. `Expect: 100-continue` is answered with `100 Continue`.
    ///
    /// ``WebSocketConfiguration/handshakeTimeout`` bounds the whole request, body and handler:
    /// a body not complete by then gets `408` (`timeout`); a handler still running then gets
    /// its socket answered `503` (`timeout`) and closed, its task cancelled and its late answer
    /// dropped. The handler runs on the connection's event loop (like `authenticate`): do not
    /// block in it. Every answer closes the connection (no keep-alive); the request counts
    /// toward ``WebSocketServerConfiguration/maxConnections`` until then.
    ///
    /// Shares one slot with ``onHTTPRequest(_:)``: whichever was set last answers every plain
    /// HTTP request.
    public func handleHTTP(_ handler: @escaping @Sendable (HTTPRequest) async -> HTTPResponse?) {
        state.withLock { $0.httpHandler = .request(handler) }
    }

    func route(for path: String) -> WebSocketRoute? { state.withLock { $0.routes[path] ?? $0.routes["*"] } }
    var httpHandler: HTTPHandler? { state.withLock { $0.httpHandler } }

    // MARK: Lifecycle

    /// Binds, serves until asked to stop, shuts down gracefully, and returns.
    ///
    /// Asked to stop means: the calling task is cancelled, ``shutdown(timeout:)`` is called,
    /// or (with the `ServiceLifecycleSupport` trait) the `ServiceGroup` running this server
    /// shuts down gracefully, e.g. on SIGTERM. Then the server stops accepting, sends close 1001
    /// to every connection, waits up to ``WebSocketServerConfiguration/shutdownTimeout`` for
    /// them to close and for route handlers to return, drops what is left, and returns.
    ///
    /// The bound port is available from ``listeningPort`` once listening (useful with port 0).
    ///
    /// - Throws: ``SwitchboardError`` if the server cannot start (address in use, bad TLS
    ///   files, …; `.cancelled` if ``shutdown(timeout:)`` came first).
    public func run() async throws(SwitchboardError) {
        try await start()
        await waitForShutdownRequest()
        await shutdown(timeout: configuration.shutdownTimeout)
    }

    /// Suspends until a shutdown is requested: cancellation, ``shutdown(timeout:)``, or a
    /// graceful shutdown of the service group.
    private func waitForShutdownRequest() async {
        await withTaskCancellationHandler {
            #if ServiceLifecycleSupport
            await withGracefulShutdownHandler {
                await waitForShutdownRequestedFlag()
            } onGracefulShutdown: { [self] in
                requestShutdown()
            }
            #else
            await waitForShutdownRequestedFlag()
            #endif
        } onCancel: { [self] in
            requestShutdown()
        }
    }

    private func waitForShutdownRequestedFlag() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let resumeNow = state.withLock { s -> Bool in
                if s.shutdownRequested || s.phase == .shuttingDown || s.phase == .stopped { return true }
                s.runWaiter = c
                return false
            }
            if resumeNow { c.resume() }
        }
    }

    /// Wakes ``run()`` so that it shuts down.
    private func requestShutdown() {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            s.shutdownRequested = true
            let w = s.runWaiter
            s.runWaiter = nil
            return w
        }
        waiter?.resume()
    }

    /// Binds and starts accepting, then returns the bound port (useful with port 0). For a
    /// server whose lifetime is a task, prefer ``run()``; after `start()`, stop the server with
    /// ``shutdown(timeout:)``. A server runs once: `start()` again throws `.invalidArgument`,
    /// and after a shutdown (even one that came before any start) `.cancelled`.
    @discardableResult
    public func start() async throws(SwitchboardError) -> Int {
        let refusal = state.withLock { s -> SwitchboardError? in
            switch s.phase {
            case .idle:
                s.phase = .starting
                return nil
            case .shuttingDown, .stopped:
                return .cancelled  // shut down already: a server runs once
            case .starting, .listening:
                return .invalidArgument("the server was already started")
            }
        }
        if let refusal { throw refusal }
        do {
            let port = try await bindAndListen()
            configuration.backplane?.attach(TopicBackplaneReceiver(registry: topics, logger: logger))
            let waiters = state.withLock { s -> [CheckedContinuation<Int, any Error>] in
                let w = s.portWaiters
                s.portWaiters = []
                return w
            }
            for w in waiters { w.resume(returning: port) }
            return port
        } catch {
            let waiters = state.withLock { s -> [CheckedContinuation<Int, any Error>] in
                s.phase = .stopped
                let w = s.portWaiters
                s.portWaiters = []
                return w
            }
            for w in waiters { w.resume(throwing: error) }
            throw error
        }
    }

    private func bindAndListen() async throws(SwitchboardError) -> Int {
        let group: EventLoopGroup
        if let sharedGroup {
            group = sharedGroup
        } else {
            do {
                group = try EventLoopGroup(loopCount: configuration.loopCount ?? ProcessInfo.processInfo.activeProcessorCount,
                                           name: "switchboard-server")
            } catch {
                throw .io(error)
            }
        }
        let ownsGroup = sharedGroup == nil
        let tlsContext: TLSContext?
        if let tls = configuration.tls {
            do { tlsContext = try TLSContext.server(tls) } catch {
                if ownsGroup { group.shutdown() }
                throw .tls(error.description)
            }
        } else {
            tlsContext = nil
        }
        let addresses: [SocketAddress]
        do {
            addresses = try await SocketAddress.resolve(host: configuration.host, port: configuration.port)
        } catch {
            if ownsGroup { group.shutdown() }
            if let e = error as? SwitchboardError { throw e }
            throw .invalidArgument("cannot resolve \(configuration.host)")
        }
        guard let address = addresses.first else {
            if ownsGroup { group.shutdown() }
            throw .invalidArgument("cannot resolve \(configuration.host)")
        }
        let fd: Int32
        do {
            fd = try Socket.makeTCP(family: address.family)
            Socket.setReuseAddress(fd)
            try Socket.bindAndListen(fd, address: address, backlog: configuration.backlog)
        } catch {
            if ownsGroup { group.shutdown() }
            throw .io(error)
        }
        let port = Socket.localAddress(fd)?.port ?? configuration.port
        let acceptLoop = group.loops[0]
        let listener = Listener(loop: acceptLoop, fd: fd, logger: logger) { [self] client, peer in
            accepted(client, peer: peer, group: group, tls: tlsContext)
        }
        let result: Result<Void, SocketError> = await withCheckedContinuation { c in
            acceptLoop.execute {
                do throws(SocketError) {
                    try listener.start()
                    c.resume(returning: .success(()))
                } catch {
                    c.resume(returning: .failure(error))
                }
            }
        }
        if case .failure(let e) = result {
            Socket.close(fd)
            if ownsGroup { group.shutdown() }
            throw .io(e)
        }
        let stillWanted = state.withLock { s -> Bool in
            guard s.phase == .starting else { return false }
            s.phase = .listening
            s.group = group
            s.listener = listener
            s.port = port
            return true
        }
        guard stillWanted else {
            // shutdown() ran while we were binding: undo, so nothing is left listening.
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                acceptLoop.execute { listener.close(); c.resume() }
            }
            if ownsGroup { group.shutdown() }
            throw .cancelled
        }
        logger.info("listening", metadata: ["address": "\(configuration.host):\(port)", "tls": "\(tlsContext != nil)",
                                            "event_loop": "\(group.backend)"])
        return port
    }

    /// The bound port once started (nil before, and after a failed start).
    public var port: Int? { state.withLock { $0.port } }

    /// The bound port: waits until the server listens (``run()`` or ``start()`` called from
    /// another task), so tests and embedders can bind port 0 and then connect.
    ///
    /// - Throws: the error that stopped the server from starting, or ``SwitchboardError`` of
    ///   kind `.notConnected` if it has already stopped without listening.
    public var listeningPort: Int {
        get async throws {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Int, any Error>) in
                let answer = state.withLock { s -> Result<Int, SwitchboardError>? in
                    if let port = s.port { return .success(port) }
                    if s.phase == .stopped || s.phase == .shuttingDown { return .failure(.notConnected) }
                    s.portWaiters.append(c)
                    return nil
                }
                if let answer { c.resume(with: answer.mapError { $0 as any Error }) }
            }
        }
    }

    /// ``WebSocketServerConfiguration/maxConnectionsPerAddress`` in force: nil when off (nil, or
    /// below 1).
    private var perAddressLimit: Int? { configuration.maxConnectionsPerAddress.flatMap { $0 > 0 ? $0 : nil } }

    /// A socket just accepted, on the accept loop: counted and handed to a loop for its
    /// handshake, or refused at once (``refuse(_:reason:tls:loop:)``).
    private func accepted(_ fd: Int32, peer: SocketAddress, group: EventLoopGroup, tls: TLSContext?) {
        // Only the accept loop adds to `sockets` and to the per-address counts, so checking then
        // adding cannot overshoot. The per-address count costs one dictionary access, in the lock
        // taken anyway, and only while the cap is on.
        let full = counters.sockets.load(ordering: .relaxed) >= configuration.maxConnections
        let limit = perAddressLimit
        let address = limit == nil ? nil : peer.peerKey
        let refusal = state.withLock { s -> RejectionReason? in
            if s.phase == .shuttingDown || s.phase == .stopped { return .shuttingDown }
            if full { return .capacity }
            if let limit, let address, !s.connectionsPerAddress.admit(address, limit: limit) { return .addressCapacity }
            return nil
        }
        if let refusal {
            refuse(fd, reason: refusal, tls: tls != nil, loop: group.next())
            return
        }
        counters.sockets.wrappingAdd(1, ordering: .relaxed)
        Socket.setNoDelay(fd)
        let loop = group.next()
        // Always queued, even on the accepting loop's own thread: registered from inside this
        // batch of epoll events, the new socket could take the slot of a connection closed
        // earlier in the batch whose own event is still to come, and receive that event.
        let server = self
        loop.execute { server.startConnection(fd, peer: address, remote: peer, loop: loop, tls: tls) }
    }

    /// Starts an admitted socket's handshake on `loop` (its thread).
    private func startConnection(_ fd: Int32, peer address: PeerAddressKey?, remote: SocketAddress, loop: EventLoop,
                                 tls: TLSContext?) {
        var session: TLSSession?
        if let tls {
            session = try? TLSSession(serverWith: tls)
            if session == nil {
                Socket.close(fd)
                socketReleased(from: address)
                return
            }
        }
        let channel = SocketChannel(loop: loop, fd: fd, tls: session)
        ServerHandshakeHandler(server: self, channel: channel, peer: address, remote: remote).start()
    }

    /// Refuses a socket just accepted (counted as a rejection; it never counted toward the caps).
    ///
    /// On a TLS listener the socket is reset at once, before any TLS handshake: a plain-text
    /// answer means nothing to a TLS client, and the handshake is the costly part (work for
    /// every refused socket, each held up to the handshake timeout). On a plain listener it gets
    /// its HTTP answer, `503` (capacity, shutting down) or `429` (its address is over
    /// ``WebSocketServerConfiguration/maxConnectionsPerAddress``), and is closed once that is
    /// written (after the handshake timeout at the latest, for a peer that does not read).
    private func refuse(_ fd: Int32, reason: RejectionReason, tls: Bool, loop: EventLoop) {
        guard !tls else {
            counters.recordRejection(reason, status: nil)
            Socket.reset(fd)
            return
        }
        let tooMany = reason == .addressCapacity
        counters.recordRejection(reason, status: tooMany ? 429 : 503)
        let linger = configuration.connection.handshakeTimeout
        loop.execute {
            let response = tooMany
                ? HTTPResponse.error(status: 429, message: "too many connections from this address", type: .rateLimit,
                                     code: "too_many_connections")
                : HTTPResponse.error(status: 503, message: "server at capacity or shutting down", type: .overloaded,
                                     code: "unavailable")
            let channel = SocketChannel(loop: loop, fd: fd, tls: nil)
            do { try channel.activate() } catch { channel.close(); return }
            channel.write(response.bytes)
            channel.closeAfterFlush(linger: linger)
        }
    }

    /// A counted socket that did not become a connection has closed (its handshake failed or
    /// was refused): its places in the caps are free again. `peer`: its address, when
    /// ``WebSocketServerConfiguration/maxConnectionsPerAddress`` counted it.
    func socketReleased(from peer: PeerAddressKey?) {
        if let peer { state.withLock { $0.connectionsPerAddress.release(peer) } }
        counters.socketReleased()
    }

    /// Peer addresses with a socket counted now by the per-address cap (empty when it is off).
    var addressesWithConnections: Int { state.withLock { $0.connectionsPerAddress.addresses } }

    /// An upgraded connection; `peer`: its address, when
    /// ``WebSocketServerConfiguration/maxConnectionsPerAddress`` counts it (released when it closes).
    func register(_ connection: WebSocketConnection, peer: PeerAddressKey?) {
        counters.accepted.wrappingAdd(1, ordering: .relaxed)
        counters.open.wrappingAdd(1, ordering: .relaxed)
        counters.metrics?.connectionOpened()
        state.withLock {
            $0.connections[ObjectIdentifier(connection)] = connection
            if let peer { $0.connectionPeers[ObjectIdentifier(connection)] = peer }
        }
        logger.debug("connection open", metadata: ["connection": "\(connection.id)",
                                                   "path": "\(connection.request?.path ?? "")"])
    }

    /// A route handler's task is about to start (task routes).
    func handlerStarted() {
        state.withLock { $0.runningHandlers += 1 }
    }

    /// A route handler's task has returned and its connection is closed.
    func handlerFinished() {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.runningHandlers -= 1
            return s.drained ? s.takeDrainWaiters() : []
        }
        for w in waiters { w.resume() }
    }

    /// The connection has closed (``ConnectionCounters/connectionClosed(_:status:)``; the
    /// connection logged it). Nothing per connection is kept for this (no closure, no logger
    /// copy): idle memory is what the connection itself holds.
    private func unregister(_ connection: WebSocketConnection, status: WebSocketCloseStatus) {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            _ = s.connections.removeValue(forKey: ObjectIdentifier(connection))
            // Before `sockets` goes down (the caller does that next), so both caps free together.
            if !s.connectionPeers.isEmpty, let peer = s.connectionPeers.removeValue(forKey: ObjectIdentifier(connection)) {
                s.connectionsPerAddress.release(peer)
            }
            return s.drained ? s.takeDrainWaiters() : []
        }
        topics.unsubscribeAll(connection)
        for w in waiters { w.resume() }
    }

    /// Stops accepting, sends close 1001 to every connection (after whatever they already
    /// queued), waits up to `timeout` for their close handshakes and for route handlers to
    /// return, then drops the connections left and stops the server's own event loops (loops
    /// given at init keep running). Idempotent; a ``run()`` in progress returns once this is
    /// done.
    public func shutdown(timeout: Duration = .seconds(10)) async {
        let (listener, connections, first) = state.withLock { s -> (Listener?, [WebSocketConnection], Bool) in
            let first = s.phase != .shuttingDown && s.phase != .stopped
            if first { s.phase = .shuttingDown }
            let l = s.listener
            s.listener = nil
            return (l, Array(s.connections.values), first)
        }
        requestShutdown()
        let portWaiters = state.withLock { s -> [CheckedContinuation<Int, any Error>] in
            let w = s.portWaiters
            s.portWaiters = []
            return w
        }
        for w in portWaiters { w.resume(throwing: SwitchboardError.notConnected) }
        if let listener {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                listener.loop.execute { listener.close(); c.resume() }
            }
        }
        if first {
            logger.info("shutting down", metadata: ["connections": "\(connections.count)"])
        }
        for c in connections {
            c.loop.execute { c.assumeIsolated { $0.startClose(code: .goingAway, reason: "server shutting down") } }
        }
        let drained = await waitUntilDrained(timeout: timeout)
        let (left, group) = state.withLock { (Array($0.connections.values), $0.group) }
        if !drained {
            let handlers = state.withLock { $0.runningHandlers }
            logger.warning("shutdown timeout: dropping connections", metadata: [
                "connections": "\(left.count)", "handlers": "\(handlers)", "timeout": "\(timeout)",
            ])
        }
        for c in left {
            await c.abort()
        }
        let ownedGroup = state.withLock { s -> EventLoopGroup? in
            guard s.phase != .stopped else { return nil }
            s.phase = .stopped
            s.group = nil
            return sharedGroup == nil ? group : nil
        }
        ownedGroup?.shutdown()
        if first { await configuration.backplane?.detach() }
    }

    /// Waits until every connection has closed and every handler returned (true), or until
    /// `timeout` passed (false). Event-driven: woken by the last close or handler return. Not
    /// cut short by the caller's cancellation (a cancelled ``run()`` still gives connections
    /// their close handshake, bounded by `timeout`).
    private func waitUntilDrained(timeout: Duration) async -> Bool {
        if state.withLock({ $0.drained }) { return true }
        return await Task { await waitUntilDrainedOrTimeout(timeout) }.value
    }

    private func waitUntilDrainedOrTimeout(_ timeout: Duration) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask { [self] in
                // Woken by the last close or handler return, or by a timeout (this one's, which
                // also cancels this task, or a concurrent shutdown's, after which it waits on).
                while !Task.isCancelled {
                    await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                        // Checked under the lock the timeout path takes the waiters under: a
                        // cancellation that came first is seen here, so nothing parks for ever.
                        let now = state.withLock { s -> Bool in
                            if s.drained || Task.isCancelled { return true }
                            s.drainWaiters.append(c)
                            return false
                        }
                        if now { c.resume() }
                    }
                    if state.withLock({ $0.drained }) { return true }
                }
                return false
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            if !first {
                // Timed out: wake the waiter still parked (now cancelled), so the group can finish.
                let waiters = state.withLock { $0.takeDrainWaiters() }
                for w in waiters { w.resume() }
            }
            return first
        }
    }

    // MARK: Topics

    /// Subscribes `connection` to `topic` (unsubscribed automatically when it closes).
    @discardableResult
    public func subscribe(_ connection: WebSocketConnection, to topic: String) -> Bool {
        topics.subscribe(connection, to: topic)
    }

    /// Subscribes `connection` to `topic` with the topic's publications held for it until
    /// ``TopicCatchUp/finish(sending:filter:)``: read what the subscriber missed from your store
    /// in between, then send it first, with no gap and no duplicate (see ``TopicCatchUp``).
    /// With a backplane, also wait for ``waitUntilReceivingFromOtherProcesses(_:)`` before
    /// reading the store.
    public func subscribeCatchingUp(_ connection: WebSocketConnection, to topic: String) async -> TopicCatchUp {
        let generation = await connection.beginCatchUp(topic)
        _ = topics.subscribe(connection, to: topic)
        return TopicCatchUp(topic: topic, connection: connection, generation: generation)
    }

    /// Subscribes `connection` to `topic` and sends it, first, every message of the topic it
    /// missed after `position` (the last one it received, from a previous connection), then the
    /// live messages: no gap, no duplicate, in order. Needs
    /// ``WebSocketServerConfiguration/topicReplay``.
    ///
    /// When that cannot be done (the buffer no longer reaches back to `position`, or `position`
    /// is from another epoch: the server restarted, the topic was forgotten while idle, the
    /// backplane reported a gap), the outcome is ``TopicSubscription/Outcome/failed(_:)`` and
    /// nothing of the history is sent: tell the subscriber, never skip silently. Without
    /// `position` the subscription starts at the newest message (``TopicSubscription/position``,
    /// which the subscriber should keep).
    ///
    /// The missed messages wait for room in the outbound queue like
    /// ``WebSocketConnection/send(_:compress:)``; live ones are held meanwhile (bounded by the
    /// connection's ``WebSocketConfiguration/outboundLimit``, above which it is closed with 1013).
    ///
    /// - Parameters:
    ///   - connection: the subscriber.
    ///   - topic: the topic.
    ///   - position: the last position the subscriber received (nil: it starts now).
    ///   - announce: a message sent before the missed ones (nil: none), made from the outcome:
    ///     tell the subscriber whether it got everything, and its position.
    /// - Throws: `.invalidArgument` without ``WebSocketServerConfiguration/topicReplay`` or when
    ///   `connection` is subscribed to `topic` already; `.closed` when it closed meanwhile.
    @discardableResult
    public func subscribe(_ connection: WebSocketConnection, to topic: String,
                          resumingAfter position: TopicPosition?,
                          announce: ((TopicSubscription) -> WebSocketMessage?)? = nil) async throws(SwitchboardError) -> TopicSubscription {
        guard let replay = configuration.topicReplay else {
            throw .invalidArgument("resuming a topic needs WebSocketServerConfiguration.topicReplay")
        }
        let generation = await connection.beginCatchUp(topic)
        guard let (subscription, missed) = topics.subscribeResuming(connection, to: topic, after: position,
                                                                      replay: replay) else {
            await connection.cancelCatchUp(topic: topic, generation: generation)
            throw .invalidArgument("the connection is subscribed to \(topic) already")
        }
        try await connection.finishCatchUp(topic: topic, generation: generation,
                                           first: announce.flatMap { $0(subscription) }, replaying: missed)
        return subscription
    }

    /// The position after the newest message of `topic`: nil when
    /// ``WebSocketServerConfiguration/topicReplay`` is off or the topic keeps no history now.
    public func position(of topic: String) -> TopicPosition? { topics.position(of: topic) }

    /// Removes `connection` from `topic` (nothing happens if it was not subscribed).
    public func unsubscribe(_ connection: WebSocketConnection, from topic: String) {
        topics.unsubscribe(connection, from: topic)
    }

    /// Returns once messages of `topic` published on other processes reach this server's
    /// subscribers: true at once without a ``WebSocketServerConfiguration/backplane``; with one,
    /// true once it confirmed (after the topic's first local subscription), false when it is not
    /// connected now. Subscribe first, then wait, then read any state the new subscriber must
    /// see (a room's history), so that nothing published in between is missed.
    public func waitUntilReceivingFromOtherProcesses(_ topic: String) async -> Bool {
        guard let backplane = configuration.backplane else { return true }
        return await backplane.waitUntilReceiving(topic)
    }

    /// How many connections are subscribed to `topic` now.
    public func subscriberCount(of topic: String) -> Int { topics.subscriberCount(topic) }

    /// Queues `message` on every subscriber of `topic` except `excluding`; never waits on a slow
    /// subscriber (a full outbound queue closes that subscriber with 1013). Returns how many subscribers it was queued on.
    ///
    /// With permessage-deflate, subscribers that compress without context takeover share one
    /// compressed frame (made once per set of parameters); those with their own context
    /// compress it each. `compress: false` sends it uncompressed to everyone.
    ///
    /// Runs on the caller's executor (`nonisolated(nonsending)`): called from a route handler,
    /// the subscribers on the handler's loop are served inline, with no hop.
    @discardableResult
    nonisolated(nonsending)
    public func publish(_ message: WebSocketMessage, to topic: String, excluding: WebSocketConnection? = nil,
                        compress: Bool = true) async -> Int {
        await topics.publish(message, to: topic, excluding: excluding, compress: compress)
    }

    /// Publishes without waiting, for synchronous handlers (``WebSocketCallbacks``): subscribers
    /// on the caller's event loop have the message queued before this returns, subscribers on
    /// other loops shortly after (one job per loop). Like ``publish(_:to:excluding:compress:)``, it never
    /// waits on a slow subscriber. Returns how many subscribers it was queued on or handed to.
    @discardableResult
    public func publishNow(_ message: WebSocketMessage, to topic: String, excluding: WebSocketConnection? = nil,
                           compress: Bool = true) -> Int {
        topics.publishNow(message, to: topic, excluding: excluding, compress: compress)
    }

    /// Publishes a text message.
    @discardableResult
    nonisolated(nonsending)
    public func publish(text: String, to topic: String, excluding: WebSocketConnection? = nil,
                        compress: Bool = true) async -> Int {
        await publish(.text(Array(text.utf8)), to: topic, excluding: excluding, compress: compress)
    }

    // MARK: Observability

    /// A snapshot of the server's counters. Bytes count the payload of data messages (text and
    /// binary) in each direction, like the message counts beside them: frame headers, control
    /// frames, HTTP and TLS are not included.
    public struct Statistics: Sendable, Equatable {
        /// Upgraded connections not yet closed.
        public var openConnections: Int
        /// Upgrades completed since the server started.
        public var acceptedConnections: Int
        /// Sockets and upgrade requests refused (capacity, capacity per address, shutdown, bad request, no route,
        /// origin, authentication, TLS); plain HTTP requests are not counted.
        public var rejectedConnections: Int
        /// Data messages (text and binary) received.
        public var messagesIn: Int
        /// Data messages queued for sending.
        public var messagesOut: Int
        /// Payload bytes of the data messages received.
        public var bytesIn: Int
        /// Payload bytes of the data messages sent (queued for the socket).
        public var bytesOut: Int
        /// Connections closed with 1013 because their outbound queue was full (slow consumers).
        public var slowConsumersClosed: Int
        /// Possible gaps the ``WebSocketServerConfiguration/backplane`` reported: one per topic
        /// each time it reconnected and may have missed other processes' messages.
        public var backplaneGaps: Int
        /// Resumed subscriptions that got every missed message
        /// (``WebSocketServer/subscribe(_:to:resumingAfter:announce:)``).
        public var topicResumesRecovered: Int = 0
        /// Resumed subscriptions that could not get every missed message.
        public var topicResumesFailed: Int = 0
        /// Topics with a history now (``WebSocketServerConfiguration/topicReplay``).
        public var topicHistories: Int = 0
        /// Payload bytes those histories keep.
        public var topicHistoryBytes: Int = 0
        /// Connections aborted because their peer took none of the queued bytes for
        /// ``WebSocketConfiguration/writeStallTimeout`` (also `switchboard_write_stall_closes_total`).
        public var writeStallCloses: Int = 0
        /// Bytes waiting in the connections' outbound queues after their last write (what the
        /// kernel would not take yet; 0 when every peer keeps up).
        public var queuedBytes: Int = 0
    }

    /// The counters now (each read on its own, so the snapshot is not atomic as a whole).
    public var statistics: Statistics {
        let usage = topics.historyUsage()
        return Statistics(openConnections: counters.open.load(ordering: .relaxed),
                   acceptedConnections: counters.accepted.load(ordering: .relaxed),
                   rejectedConnections: counters.rejected.load(ordering: .relaxed),
                   messagesIn: counters.messagesIn.load(ordering: .relaxed),
                   messagesOut: counters.messagesOut.load(ordering: .relaxed),
                   bytesIn: counters.bytesInTotal.load(ordering: .relaxed),
                   bytesOut: counters.bytesOutTotal.load(ordering: .relaxed),
                   slowConsumersClosed: counters.slowConsumers.load(ordering: .relaxed),
                   backplaneGaps: topics.backplaneGaps.load(ordering: .relaxed),
                   topicResumesRecovered: topics.resumesRecovered.load(ordering: .relaxed),
                   topicResumesFailed: topics.resumesFailed.load(ordering: .relaxed),
                   topicHistories: usage.topics,
                   topicHistoryBytes: usage.bytes,
                   writeStallCloses: counters.writeStallCloses.load(ordering: .relaxed),
                   queuedBytes: sharedConnectionConfiguration.outboundLimits.queuedBytes.load(ordering: .relaxed))
    }
}

