#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Logging
import Synchronization
import SwitchboardCore

/// An embeddable WebSocket server: routes by path, authenticates upgrades, runs one handler
/// task per connection on the connection's event loop, offers topics, and shuts down gracefully.
///
/// ```swift
/// let server = WebSocketServer(configuration: .init(host: "127.0.0.1", port: 8080))
/// server.route("/v1/ws") { connection in
///     for await message in connection.messages() { try? await connection.send(message) }
/// }
/// try await server.start()
/// ```
public final class WebSocketServer: Sendable {
    public let configuration: WebSocketServerConfiguration
    let logger: Logger
    let counters = ConnectionCounters()
    /// The connection settings, one copy for every connection of this server.
    let sharedConnectionConfiguration: SharedWebSocketConfiguration
    let topics = TopicRegistry()

    private struct State {
        var routes: [String: WebSocketRoute] = [:]
        var httpHandler: (@Sendable (HTTPRequestHead) -> HTTPResponse?)?
        var group: EventLoopGroup?
        var listener: Listener?
        var port: Int?
        var connections: [ObjectIdentifier: WebSocketConnection] = [:]
        var shuttingDown = false
    }
    private let state = Locked(State())

    public init(configuration: WebSocketServerConfiguration = .init(),
                logger: Logger = Logger(label: "switchboard.server")) {
        self.configuration = configuration
        self.logger = logger
        self.sharedConnectionConfiguration = SharedWebSocketConfiguration(configuration.connection)
        counters.setCloseHook { [weak self] connection, status in self?.unregister(connection, status: status) }
    }

    // MARK: Set-up

    /// Registers the handler for WebSocket upgrades on `path` (exact match, query ignored;
    /// `"*"` matches every path that has no route of its own).
    /// `authenticate` runs before the upgrade completes and can reject with 401/403.
    /// The handler runs in its own task, isolated to the connection (its parameter is
    /// `isolated`), on the connection's loop: receiving and sending cost no executor hop. Do not
    /// block in it; hand long work to another task. When it returns, the connection is closed
    /// (1000) if still open.
    public func route(_ path: String,
                      authenticate: (@Sendable (WebSocketUpgradeRequest) async -> WebSocketAuthDecision)? = nil,
                      handler: @escaping @Sendable (isolated WebSocketConnection) async -> Void) {
        state.withLock { $0.routes[path] = WebSocketRoute(authenticate: authenticate, handler: .task(handler)) }
    }

    /// Registers callbacks for WebSocket upgrades on `path`: no task per connection (see
    /// ``WebSocketCallbacks``). The lightest and fastest way to serve many connections; the
    /// task form, ``route(_:authenticate:handler:)``, reads more naturally for conversations.
    public func route(_ path: String,
                      authenticate: (@Sendable (WebSocketUpgradeRequest) async -> WebSocketAuthDecision)? = nil,
                      callbacks: WebSocketCallbacks) {
        state.withLock { $0.routes[path] = WebSocketRoute(authenticate: authenticate, handler: .callbacks(WebSocketCallbacksBox(callbacks))) }
    }

    /// Answers plain HTTP requests (no `Upgrade` header); return nil for `404`.
    public func onHTTPRequest(_ handler: @escaping @Sendable (HTTPRequestHead) -> HTTPResponse?) {
        state.withLock { $0.httpHandler = handler }
    }

    func route(for path: String) -> WebSocketRoute? { state.withLock { $0.routes[path] ?? $0.routes["*"] } }
    var httpHandler: (@Sendable (HTTPRequestHead) -> HTTPResponse?)? { state.withLock { $0.httpHandler } }

    // MARK: Lifecycle

    /// Binds and starts accepting. Returns the bound port (useful with port 0).
    @discardableResult
    public func start() async throws(SwitchboardError) -> Int {
        let group: EventLoopGroup
        do {
            group = try EventLoopGroup(loopCount: configuration.loopCount ?? ProcessInfo.processInfo.activeProcessorCount,
                                       name: "switchboard-server")
        } catch {
            throw .io(error)
        }
        let tlsContext: TLSContext?
        if let tls = configuration.tls {
            do { tlsContext = try TLSContext.server(tls) } catch { throw .tls(error.description) }
        } else {
            tlsContext = nil
        }
        let addresses: [SocketAddress]
        do {
            addresses = try await SocketAddress.resolve(host: configuration.host, port: configuration.port)
        } catch let e as SwitchboardError {
            throw e
        } catch {
            throw .invalidArgument("cannot resolve \(configuration.host)")
        }
        guard let address = addresses.first else { throw .invalidArgument("cannot resolve \(configuration.host)") }
        let fd: Int32
        do {
            fd = try Socket.makeTCP(family: address.family)
            Socket.setReuseAddress(fd)
            try Socket.bindAndListen(fd, address: address, backlog: configuration.backlog)
        } catch {
            throw .io(error)
        }
        let port = Socket.localAddress(fd)?.port ?? configuration.port
        let acceptLoop = group.loops[0]
        let listener = Listener(loop: acceptLoop, fd: fd) { [self] client, peer in
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
        if case .failure(let e) = result { Socket.close(fd); throw .io(e) }
        state.withLock {
            $0.group = group
            $0.listener = listener
            $0.port = port
        }
        logger.info("listening", metadata: ["address": "\(configuration.host):\(port)", "tls": "\(tlsContext != nil)"])
        return port
    }

    /// The bound port once started.
    public var port: Int? { state.withLock { $0.port } }

    private func accepted(_ fd: Int32, peer: SocketAddress, group: EventLoopGroup, tls: TLSContext?) {
        // Only the accept loop adds to `sockets`, so checking then adding cannot overshoot.
        let full = state.withLock { $0.shuttingDown }
            || counters.sockets.load(ordering: .relaxed) >= configuration.maxConnections
        if !full { counters.sockets.wrappingAdd(1, ordering: .relaxed) }
        Socket.setNoDelay(fd)
        let loop = group.next()
        let server = self
        loop.execute {
            var session: TLSSession?
            if let tls {
                session = try? TLSSession(serverWith: tls)
                if session == nil {
                    Socket.close(fd)
                    if !full { server.counters.socketReleased() }
                    return
                }
            }
            let channel = SocketChannel(loop: loop, fd: fd, tls: session)
            if full {
                server.counters.rejected.wrappingAdd(1, ordering: .relaxed)
                do { try channel.activate() } catch { channel.close(); return }
                channel.write(HTTPResponse.error(status: 503, message: "server at capacity or shutting down",
                                                 type: .overloaded, code: "unavailable").bytes)
                channel.closeAfterFlush(linger: server.configuration.connection.handshakeTimeout)
                return
            }
            ServerHandshakeHandler(server: server, channel: channel).start()
        }
    }

    func register(_ connection: WebSocketConnection) {
        counters.accepted.wrappingAdd(1, ordering: .relaxed)
        counters.open.wrappingAdd(1, ordering: .relaxed)
        state.withLock { $0.connections[ObjectIdentifier(connection)] = connection }
        logger.debug("connection open", metadata: ["connection": "\(connection.id)",
                                                   "path": "\(connection.request?.path ?? "")"])
    }

    /// The connection has closed (``ConnectionCounters/connectionClosed(_:status:)``). Nothing
    /// per connection is kept for this (no closure, no logger copy): idle memory is what the
    /// connection itself holds.
    private func unregister(_ connection: WebSocketConnection, status: WebSocketCloseStatus) {
        state.withLock { _ = $0.connections.removeValue(forKey: ObjectIdentifier(connection)) }
        topics.unsubscribeAll(connection)
        logger.debug("connection closed", metadata: ["connection": "\(connection.id)",
                                                     "code": "\(status.code.rawValue)"])
    }

    /// Stops accepting, sends close 1001 to every connection (after whatever they already
    /// queued), waits up to `timeout` for their close handshakes, then drops what is left and
    /// stops the event loops' work for this server.
    public func shutdown(timeout: Duration = .seconds(10)) async {
        let (listener, connections) = state.withLock { s -> (Listener?, [WebSocketConnection]) in
            s.shuttingDown = true
            let l = s.listener
            s.listener = nil
            return (l, Array(s.connections.values))
        }
        if let listener {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                listener.loop.execute { listener.close(); c.resume() }
            }
        }
        logger.info("shutting down", metadata: ["connections": "\(connections.count)"])
        for c in connections {
            c.loop.execute { c.assumeIsolated { $0.startClose(code: .goingAway, reason: "server shutting down") } }
        }
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while ContinuousClock.now < deadline, state.withLock({ !$0.connections.isEmpty }) {
            try? await Task.sleep(for: .milliseconds(5))
        }
        let (left, group) = state.withLock { (Array($0.connections.values), $0.group) }
        for c in left {
            await c.abort()
        }
        group?.shutdown()
        state.withLock { $0.group = nil }
    }

    // MARK: Topics

    /// Subscribes `connection` to `topic` (unsubscribed automatically when it closes).
    @discardableResult
    public func subscribe(_ connection: WebSocketConnection, to topic: String) -> Bool {
        topics.subscribe(connection, to: topic)
    }

    public func unsubscribe(_ connection: WebSocketConnection, from topic: String) {
        topics.unsubscribe(connection, from: topic)
    }

    public func subscriberCount(of topic: String) -> Int { topics.subscriberCount(topic) }

    /// Queues `message` on every subscriber of `topic` except `excluding`; never waits on a slow
    /// subscriber (see ``TopicRegistry``). Returns how many subscribers it was queued on.
    ///
    /// Runs on the caller's executor (`nonisolated(nonsending)`): called from a route handler,
    /// the subscribers on the handler's loop are served inline, with no hop.
    @discardableResult
    nonisolated(nonsending)
    public func publish(_ message: WebSocketMessage, to topic: String, excluding: WebSocketConnection? = nil) async -> Int {
        await topics.publish(message, to: topic, excluding: excluding)
    }

    /// Publishes without waiting, for synchronous handlers (``WebSocketCallbacks``): subscribers
    /// on the caller's event loop have the message queued before this returns, subscribers on
    /// other loops shortly after (one job per loop). Like ``publish(_:to:excluding:)``, it never
    /// waits on a slow subscriber. Returns how many subscribers it was queued on or handed to.
    @discardableResult
    public func publishNow(_ message: WebSocketMessage, to topic: String, excluding: WebSocketConnection? = nil) -> Int {
        topics.publishNow(message, to: topic, excluding: excluding)
    }

    /// Publishes a text message.
    @discardableResult
    nonisolated(nonsending)
    public func publish(text: String, to topic: String, excluding: WebSocketConnection? = nil) async -> Int {
        await publish(.text(Array(text.utf8)), to: topic, excluding: excluding)
    }

    // MARK: Observability

    /// A snapshot of the server's counters. Bytes count the payload of data messages (text and
    /// binary) in each direction, like the message counts beside them: frame headers, control
    /// frames, HTTP and TLS are not included.
    public struct Statistics: Sendable, Equatable {
        public var openConnections: Int
        public var acceptedConnections: Int
        public var rejectedConnections: Int
        public var messagesIn: Int
        public var messagesOut: Int
        /// Payload bytes of the data messages received.
        public var bytesIn: Int
        /// Payload bytes of the data messages sent (queued for the socket).
        public var bytesOut: Int
        public var slowConsumersClosed: Int
    }

    public var statistics: Statistics {
        Statistics(openConnections: counters.open.load(ordering: .relaxed),
                   acceptedConnections: counters.accepted.load(ordering: .relaxed),
                   rejectedConnections: counters.rejected.load(ordering: .relaxed),
                   messagesIn: counters.messagesIn.load(ordering: .relaxed),
                   messagesOut: counters.messagesOut.load(ordering: .relaxed),
                   bytesIn: counters.bytesInTotal.load(ordering: .relaxed),
                   bytesOut: counters.bytesOutTotal.load(ordering: .relaxed),
                   slowConsumersClosed: counters.slowConsumers.load(ordering: .relaxed))
    }
}
