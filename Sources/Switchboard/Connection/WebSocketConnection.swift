import Foundation
import Logging
import Synchronization
import SwitchboardCore

/// One open WebSocket connection, client or server side.
///
/// An actor that runs on its connection's ``EventLoop`` (the loop is its executor), so bytes
/// read from the socket are parsed and delivered without a thread hop. It is the glue between
/// parts that each have one job:
/// - the protocol core (`WebSocketProtocol`) decides every RFC 6455 rule, the close
///   handshake included;
/// - the `InboundQueue` holds received messages for the application (reading stops above its
///   high-water mark: the peer's TCP window fills instead of our memory);
/// - the `SocketChannel` owns the one bounded outbound queue: every byte for the peer goes
///   through it; `send` waits above its high-water mark (so a task stops taking messages and
///   the inbound queue stops the reading), callback routes stop reading instead, and a ping
///   flood stops the reading in both styles;
/// - `WebSocketKeepalive` decides when to ping and when the peer is dead;
/// - `LineReader` turns messages into lines for ``lines()``.
///
/// Receive with ``lines()`` (newline-delimited, one `Data` per line) **or** ``messages()`` /
/// ``receive()`` (whole messages): both draw from the same queue, so use one per connection.
/// The streams finish when the connection closes; ``closeStatus`` and ``error`` tell why.
public actor WebSocketConnection: EventLoopTimerTarget {
    /// A process-unique id, used in logs.
    public nonisolated let id: UInt64
    /// Client or server side: who masks frames and who closes TCP first.
    public nonisolated let role: WebSocketRole
    /// The subprotocol both sides agreed on, if any.
    public nonisolated let subprotocol: String?
    /// Server side: the upgrade request (path, query, headers). The fields only the handshake
    /// needed (`Upgrade`, `Connection`, `Sec-WebSocket-Key`, `-Version`, `-Extensions`) are not
    /// kept; `key`, `subprotocols` and `origin` hold their values.
    public nonisolated var request: WebSocketUpgradeRequest? {
        if case .server(let request) = handshake { request } else { nil }
    }
    /// Client side: the server's `101 Switching Protocols` response head (its `Set-Cookie`
    /// fields among others; see ``setCookies``). Nil on the server side.
    public nonisolated var handshakeResponse: HTTPResponseHead? {
        if case .client(let record) = handshake { record.response } else { nil }
    }
    /// Client side: the values of the handshake response's `Set-Cookie` fields, in order (send
    /// them back with a `Cookie` header of the endpoint's next connection if you need to).
    public nonisolated var setCookies: [String] { handshakeResponse?.headers.values(for: "Set-Cookie") ?? [] }
    /// Client side: the negotiated TLS version (`TLSv1.2`, `TLSv1.3`), nil for `ws` and on the
    /// server side.
    public nonisolated var tlsVersion: String? {
        if case .client(let record) = handshake { record.tlsVersion } else { nil }
    }
    /// What the opening handshake left: the request (server) or the response (client), in one
    /// field so that a connection pays for one of them only.
    private nonisolated let handshake: ConnectionHandshake?
    /// Server side: what the authentication hook attached (e.g. the user id).
    public nonisolated let userInfo: [String: String]
    nonisolated let loop: EventLoop
    nonisolated let channel: SocketChannel
    /// The settings this connection runs with.
    public nonisolated var configuration: WebSocketConfiguration { sharedConfiguration.value }
    /// One copy per server (or client connection), not one per connection: memory per idle
    /// connection is what a connection keeps.
    private nonisolated let sharedConfiguration: SharedWebSocketConfiguration

    /// The connection's event loop: the actor runs there, beside its socket.
    public nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    // State below is internal rather than private only so that this type's own extensions
    // (WebSocketConnection+Closing.swift, +Sending.swift) can reach it; nothing else does.
    //
    // `proto` and `rng` are read and changed on every frame; their accesses are not checked for
    // exclusivity at run time (`@exclusivity(unchecked)`: each check is a thread-local lookup,
    // about 7% of a connection cycle's user time in the churn profile, issue 37). Sound here:
    // both are plain values whose methods call out to nothing, and only the connection's own
    // synchronous, actor-isolated code touches them, so no access can begin while another
    // is under way. The compiler's static checks still apply.
    @exclusivity(unchecked) var proto: WebSocketProtocol
    @exclusivity(unchecked) var rng = SecureRandom()
    /// Payload sizes whose storage is offered back to the core for the next message
    /// (``WebSocketProtocol/recycle(_:)``): below, the allocator's own caches do well; above,
    /// one idle connection would keep too much.
    static let recycledSizes = (16 << 10)...(1 << 20)
    var inbound: InboundQueue
    /// Who takes this connection's messages, when the server knows: one field for what a
    /// connection has at most one of. Nine bytes (a pointer and a tag), declared just before a
    /// `Bool` that fills the rest of its word: no larger than the callbacks box alone was (idle
    /// memory per connection).
    var consumer: Consumer = .unknown

    /// See ``consumer``.
    enum Consumer {
        /// A client connection, or a server connection before its route starts.
        case unknown
        /// A callback route: messages are handed to `onMessage` as they are parsed, and nothing
        /// is queued for `receive()`. The box is shared by every connection of the route.
        case callbacks(WebSocketCallbacksBox)
        /// A task route's own task while its handler runs (``beginHandlerTask()``): its
        /// address, compared with the current task's, never used to reach it.
        case handlerTask(UnsafeRawPointer)
    }

    /// True from handing a message to the application until it asks for the next one.
    var applicationHoldsMessage = false
    /// The state of ``lines()``, created on first use.
    private var lineReader: LineReader?
    /// Set for connections of a callback route (see ``Consumer/callbacks(_:)``).
    var callbacksBox: WebSocketCallbacksBox? {
        get { if case .callbacks(let box) = consumer { box } else { nil } }
        set {
            if let newValue {
                consumer = .callbacks(newValue)
            } else if case .callbacks = consumer {
                consumer = .unknown
            }
        }
    }
    var callbacks: WebSocketCallbacks? { callbacksBox?.callbacks }

    private var keepalive: WebSocketKeepalive?
    private var keepaliveTimer: EventLoopTimer?
    /// The authentication deadline and its timer (WebSocketConnection+Authentication.swift);
    /// nil for a connection accepted without `expiresAt`.
    var authenticationExpiry: ConnectionAuthenticationExpiry?
    /// Close-time state, allocated when first needed (see ``ConnectionClosingState``).
    private var closingState: ConnectionClosingState?
    /// Topics in catch-up (``TopicCatchUp``); nil unless used.
    var topicCatchUps: ConnectionTopicCatchUps?
    private var ensuredClosingState: ConnectionClosingState {
        if let s = closingState { return s }
        let s = ConnectionClosingState()
        closingState = s
        return s
    }

    /// The one closing timer: while the peer's close waits for the application to answer
    /// earlier messages (``closeReplyGrace``), then while waiting for the peer's close or the
    /// server's TCP close (``WebSocketConfiguration/closeTimeout``).
    var closeTimer: EventLoopTimer? {
        get { closingState?.closeTimer }
        set { if newValue != nil || closingState != nil { ensuredClosingState.closeTimer = newValue } }
    }

    var sendWaiters: [CheckedContinuation<Void, Never>] = []
    var closeWaiters: [CheckedContinuation<Void, Never>] {
        get { closingState?.closeWaiters ?? [] }
        set { if !newValue.isEmpty || closingState != nil { ensuredClosingState.closeWaiters = newValue } }
    }
    var transportClosed = false
    var closeHandlers: [@Sendable (WebSocketCloseStatus) -> Void] {
        get { closingState?.closeHandlers ?? [] }
        set { if !newValue.isEmpty || closingState != nil { ensuredClosingState.closeHandlers = newValue } }
    }
    let counters: ConnectionCounters?

    /// Why the connection ended (nil while open): the close code and reason from the close
    /// handshake, 1006 if the TCP connection ended without one, or the code we failed with.
    public internal(set) var closeStatus: WebSocketCloseStatus? {
        get { closingState?.closeStatus }
        set { if newValue != nil || closingState != nil { ensuredClosingState.closeStatus = newValue } }
    }
    /// The error that ended the connection, if it did not end with a clean close handshake.
    public internal(set) var error: SwitchboardError? {
        get { closingState?.error }
        set { if newValue != nil || closingState != nil { ensuredClosingState.error = newValue } }
    }
    /// The permessage-deflate parameters negotiated in the handshake, nil when the connection is
    /// uncompressed.
    public var compression: PerMessageDeflateParameters? { proto.deflate?.parameters }

    /// Round-trip time of the last keepalive ping answered (nil until one has been).
    public var lastPingRoundTrip: Duration? {
        lastPingRoundTripNanoseconds < 0 ? nil : .nanoseconds(lastPingRoundTripNanoseconds)
    }
    /// ``lastPingRoundTrip`` in nanoseconds, -1 until a ping has been answered: 8 bytes where a
    /// `Duration?` takes 17, the difference between two malloc size classes for every
    /// connection (idle memory).
    private var lastPingRoundTripNanoseconds: Int64 = -1

    /// Longest we hold our close reply while the application answers messages it already has
    /// (1 s: ample for an echo or an acknowledgement, short enough for the peer's close timer).
    static let closeReplyGrace: Duration = .seconds(1)

    private static let nextID = Atomic<UInt64>(1)

    init(channel: SocketChannel, role: WebSocketRole, subprotocol: String?, request: WebSocketUpgradeRequest?,
         configuration: WebSocketConfiguration, deflate: PerMessageDeflateParameters? = nil,
         counters: ConnectionCounters? = nil, userInfo: [String: String] = [:]) {
        self.init(channel: channel, role: role, subprotocol: subprotocol, handshake: request.map { .server($0) },
                  sharedConfiguration: SharedWebSocketConfiguration(configuration), deflate: deflate,
                  counters: counters, userInfo: userInfo)
    }

    /// A client connection: `response` is the server's 101 answer.
    init(channel: SocketChannel, subprotocol: String?, response: HTTPResponseHead, tlsVersion: String?,
         configuration: WebSocketConfiguration, deflate: PerMessageDeflateParameters? = nil,
         counters: ConnectionCounters? = nil) {
        self.init(channel: channel, role: .client, subprotocol: subprotocol,
                  handshake: .client(ClientHandshakeRecord(response: response, tlsVersion: tlsVersion)),
                  sharedConfiguration: SharedWebSocketConfiguration(configuration), deflate: deflate,
                  counters: counters)
    }

    /// `deflate`: the permessage-deflate parameters the handshake negotiated (with
    /// ``WebSocketConfiguration/compression`` set), nil for none.
    init(channel: SocketChannel, role: WebSocketRole, subprotocol: String?, request: WebSocketUpgradeRequest?,
         sharedConfiguration: SharedWebSocketConfiguration, deflate: PerMessageDeflateParameters? = nil,
         counters: ConnectionCounters? = nil, userInfo: [String: String] = [:]) {
        self.init(channel: channel, role: role, subprotocol: subprotocol, handshake: request.map { .server($0) },
                  sharedConfiguration: sharedConfiguration, deflate: deflate, counters: counters, userInfo: userInfo)
    }

    private init(channel: SocketChannel, role: WebSocketRole, subprotocol: String?, handshake: ConnectionHandshake?,
         sharedConfiguration: SharedWebSocketConfiguration, deflate: PerMessageDeflateParameters? = nil,
         counters: ConnectionCounters? = nil, userInfo: [String: String] = [:]) {
        let configuration = sharedConfiguration.value
        self.userInfo = userInfo
        self.id = Self.nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        self.channel = channel
        self.loop = channel.loop
        self.role = role
        self.subprotocol = subprotocol
        self.handshake = handshake
        self.sharedConfiguration = sharedConfiguration
        self.counters = counters
        // On the loop (the handshake ran there): its shared streams are loop-confined.
        let codec = deflate.map {
            channel.loop.deflateStreams.codec(parameters: $0, configuration: configuration.compression ?? .default, role: role)
        }
        self.proto = WebSocketProtocol(role: role, limits: configuration.protocolLimits, deflate: codec)
        self.inbound = InboundQueue(highWaterMark: configuration.inboundHighWaterMark,
                                    lowWaterMark: configuration.inboundLowWaterMark)
        channel.limits = sharedConfiguration.outboundLimits
    }

    /// Takes over the channel (on the loop thread) and parses bytes that arrived with the handshake.
    /// With `callbacks`, messages go to them instead of the receive queue. With
    /// `authenticationExpiresAt`, the connection closes with 4001 at that time unless extended.
    nonisolated func start(leftover: [UInt8], callbacks: WebSocketCallbacksBox? = nil,
                           authenticationExpiresAt: Date? = nil) {
        loop.assertInEventLoop()
        channel.delegate = self
        // A callback answers synchronously and cannot wait for room: the channel stops reading
        // while the outbound queue is above its high-water mark instead.
        channel.pausesReadingAboveHighWaterMark = callbacks != nil
        Self.startEntry(self, (leftover, callbacks, authenticationExpiresAt))
    }

    private static let startEntry = ConnectionLoopEntry<([UInt8], WebSocketCallbacksBox?, Date?)> { conn, arguments in
        let (leftover, callbacks, authenticationExpiresAt) = arguments
        conn.callbacksBox = callbacks
        conn.startKeepalive()
        conn.startAuthenticationExpiry(authenticationExpiresAt)
        do {
            try callbacks?.callbacks.onOpen?(conn)
        } catch {
            conn.callbackThrew(error)
        }
        if !leftover.isEmpty {
            leftover.withUnsafeBytes { conn.handleRead($0) }
        }
    }

    // MARK: Receiving

    /// One element per received line (split on `\n` or `\r\n`, terminator removed), lines
    /// spanning any number of messages. Finishes when the connection closes; a line longer than
    /// ``WebSocketConfiguration/maxLineLength`` fails the connection with 1009. Cancelling the
    /// consuming task finishes the stream and closes the connection with 1001.
    ///
    /// The lines of one read are handed over together: a consumer that keeps up costs one
    /// executor hop per read, not per line.
    public nonisolated func lines() -> AsyncStream<Data> {
        let buffer = LineBatchBuffer()
        return AsyncStream(unfolding: { [self] in
            if let line = buffer.pop() { return line }
            return await buffer.refill { await self.nextLines() }
        },
                           onCancel: { [self] in Task { await self.close(code: .goingAway, reason: "") } })
    }

    /// One element per received message. Finishes when the connection closes. Cancelling the
    /// consuming task finishes the sequence and closes the connection with 1001. Iterate from
    /// one task at a time: a second task iterating while the first waits gets the end of the
    /// sequence at once (``receive()`` says why).
    public nonisolated func messages() -> WebSocketMessageSequence {
        WebSocketMessageSequence(connection: self)
    }

    /// The next whole message, or nil once the connection has closed and every received message
    /// has been delivered.
    ///
    /// - Throws: ``SwitchboardError`` of kind `.concurrentReceive` when another task is already
    ///   waiting here: one receiver per connection.
    public func receive() async throws(SwitchboardError) -> WebSocketMessage? {
        switch prepareToReceive() {
        case .message(let m): return m
        case .end: return nil
        case .concurrent: throw .concurrentReceive
        case .wait: return await waitForMessage()
        }
    }

    /// `receive()`, and on cancellation of the waiting task the close handshake (1001). What
    /// ``messages()`` iterates: written out rather than calling `receive()`, since every async
    /// call in this chain is a frame the suspended task keeps (idle memory per connection).
    func nextMessage() async -> WebSocketMessage? {
        switch prepareToReceive() {
        case .message(let m): return m
        case .end, .concurrent: break
        case .wait: if let m = await waitForMessage() { return m }
        }
        if Task.isCancelled { startClose(code: .goingAway, reason: "") }
        return nil
    }

    // MARK: The route handler's own task

    /// Called by the server in a task route's own task, on the connection's loop (the task's
    /// preferred executor), just before its handler runs.
    ///
    /// Nothing can cancel that task while it is suspended: the server keeps no handle to it, and
    /// a task is cancelled only through its handle, or by its parent, which it does not have.
    /// So its waits in ``messages()`` need no cancellation handler (one per awaited message:
    /// a status record added and removed under the task's lock, two executor switches, and
    /// about 160 bytes of the suspended task's frames). A task cancelled while it runs (it
    /// cancelled itself) sees it before it waits.
    nonisolated func beginHandlerTask() { Self.handlerTaskEntry(self, true) }

    /// Called by the server on the loop when the handler has returned, before its task ends.
    nonisolated func endHandlerTask() { Self.handlerTaskEntry(self, false) }

    private static let handlerTaskEntry = ConnectionLoopEntry<Bool> { (connection: isolated WebSocketConnection, begin) in
        if begin {
            if let task = WebSocketConnection.currentTaskAddress() { connection.consumer = .handlerTask(task) }
        } else if case .handlerTask = connection.consumer {
            connection.consumer = .unknown
        }
    }

    /// The current task's address: an identity to compare, never dereferenced.
    private static func currentTaskAddress() -> UnsafeRawPointer? {
        withUnsafeCurrentTask { task in task.map { unsafeBitCast($0, to: UnsafeRawPointer.self) } }
    }

    /// Whether the current task is the route handler's own task (``beginHandlerTask()``).
    static let isHandlerTaskEntry = ConnectionLoopCall<Void, Bool, Never> {
        (connection: isolated WebSocketConnection, _) in
        guard case .handlerTask(let handler) = connection.consumer else { return false }
        return WebSocketConnection.currentTaskAddress() == handler
    }

    /// ``prepareToReceive()`` from code isolated to the connection that cannot say so statically.
    static let prepareToReceiveEntry = ConnectionLoopCall<Void, ReceiveStep, Never> {
        (connection: isolated WebSocketConnection, _) in connection.prepareToReceive()
    }

    /// Registers the route handler's own task as the waiting receiver (or resumes it at once):
    /// ``waitForMessage()`` without the cancellation handler, which that task does not need.
    static let handlerWaitEntry = ConnectionLoopEntry<UnsafeContinuation<WebSocketMessage?, Never>> {
        (connection: isolated WebSocketConnection, c) in
        connection.beginWaiting(c)
    }

    /// After the end of messages: as in ``nextMessage()``, a cancelled task closes with 1001.
    static let receiveEndEntry = ConnectionLoopEntry<Void> { (connection: isolated WebSocketConnection, _) in
        if Task.isCancelled { connection.startClose(code: .goingAway, reason: "") }
    }

    enum ReceiveStep { case message(WebSocketMessage), end, concurrent, wait }

    /// The synchronous part of receiving: a queued message, the end, or wait.
    private func prepareToReceive() -> ReceiveStep {
        applicationHoldsMessage = false          // asking for the next one: done with the last
        if let m = takeQueued() { return .message(m) }
        // The application has handled everything it had: a close held for it goes out now.
        if proto.state == .closeReceived { replyToClose() }
        guard mayReceiveMore else { return .end }
        return inbound.hasWaiter ? .concurrent : .wait
    }

    /// Suspends until a message arrives (nil: the end, or the task was cancelled).
    @inline(__always)
    private func waitForMessage() async -> WebSocketMessage? {
        await withTaskCancellationHandler {
            await withUnsafeContinuation { (c: UnsafeContinuation<WebSocketMessage?, Never>) in beginWaiting(c) }
        } onCancel: { [self] in
            loop.execute { self.assumeIsolated { $0.inbound.resumeWaiter() } }
        }
    }

    /// Resumes `c` at once with a queued message, or with nil at the end (or in a cancelled
    /// task), or makes it the waiter the next message resumes.
    private func beginWaiting(_ c: UnsafeContinuation<WebSocketMessage?, Never>) {
        if let m = takeQueued() {
            c.resume(returning: m)
        } else if !mayReceiveMore || Task.isCancelled || !inbound.wait(c) {
            c.resume(returning: nil)
        }
    }

    /// Messages received and not yet taken by the application.
    var queuedMessageCount: Int { inbound.count }
    /// Whether a task is waiting in ``receive()``.
    var hasWaitingReceiver: Bool { inbound.hasWaiter }

    /// Whether a message may still arrive: open, or our close sent and the peer's not yet in.
    private var mayReceiveMore: Bool { !transportClosed && (proto.state == .open || proto.state == .closing) }

    /// The next line (see ``lines()``).
    /// The next lines (see ``lines()`` and ``LineReader/nextBatch(from:)``); nil at the end.
    func nextLines() async -> [Data]? {
        let reader: LineReader
        if let lineReader {
            reader = lineReader
        } else {
            reader = LineReader(configuration: configuration)
            lineReader = reader
        }
        return await reader.nextBatch(from: self)
    }

    /// A callback route's `onOpen` or `onMessage` threw: logged, counted, closed with 1011.
    func callbackThrew(_ error: any Error) {
        counters?.logger.error("route callback threw; closing with 1011", metadata: [
            "connection": "\(id)", "path": "\(request?.path ?? "")", "error": "\(String(reflecting: error))",
        ])
        counters?.metrics?.handlerFailed()
        startClose(code: .internalError, reason: "")
    }

    /// Called by ``LineReader`` when a line is longer than the limit.
    func failLineTooLong() {
        inbound.removeAll()
        fail(.limitExceeded("line longer than \(configuration.maxLineLength) bytes"), code: .messageTooBig,
             reason: "line too long")
    }

    /// A message already received, if any, without waiting (``LineReader`` batching).
    func takeQueuedMessage() -> WebSocketMessage? {
        applicationHoldsMessage = false
        return takeQueued()
    }

    func takeQueued() -> WebSocketMessage? {
        guard let (m, resumeReading) = inbound.pop() else { return nil }
        applicationHoldsMessage = true
        if resumeReading && proto.state == .open { channel.setReading(true) }
        return m
    }

    fileprivate func handleRead(_ bytes: UnsafeRawBufferPointer) {
        var offset = 0
        // A message handed to the application in this same read: a close arriving after it waits
        // for the application's answer.
        var deliveredNow = false
        while let action = proto.nextAction(in: bytes, offset: &offset, using: &rng) {
            switch action {
            case .message(let message):
                counters?.messageIn(bytes: message.payloadCount)
                if Self.recycledSizes.contains(message.payloadCount) {
                    // Shared with the application until it lets go; reused after that.
                    switch message { case .text(let b), .binary(let b): proto.recycle(b) }
                }
                if let callbacksBox {
                    // Handled (and answered) synchronously: nothing is held for the application.
                    do {
                        try callbacksBox.callbacks.onMessage(self, message)
                    } catch {
                        callbackThrew(error)
                    }
                } else {
                    deliver(message)
                    deliveredNow = true
                }
            case .sendPong(let frame):
                channel.queuePong(frame)
            case .pong(let payload):
                receivedPong(payload)
            case .peerClosed(let status), .failed(let status):
                record(status)
                if proto.state == .closeReceived {
                    closeReceived(status, applicationBusy: deliveredNow)
                }
            case .closeTransport(let status):
                closeHandshakeComplete(status)
            }
        }
    }

    private func deliver(_ message: WebSocketMessage) {
        // After our close frame (§7.1.4 lets us discard what follows it), a full queue drops
        // messages instead of stopping reading: the peer's close must still get through.
        if proto.state != .open && inbound.isFull { return }
        switch inbound.push(message) {
        case .handedToReceiver:
            applicationHoldsMessage = true
        case .queued:
            break
        case .full:
            if proto.state == .open {
                channel.setReading(false)
                counters?.backpressurePaused()
            }
        }
    }

    // MARK: Keepalive

    private func startKeepalive() {
        guard let interval = configuration.pingInterval else { return }
        var machine = WebSocketKeepalive(interval: interval.nanosecondsClamped,
                                         timeout: configuration.pongTimeout.nanosecondsClamped)
        machine.start(now: EventLoop.now())
        keepalive = machine
        armKeepaliveTimer()
    }

    func stopKeepalive() {
        keepalive = nil
        keepaliveTimer?.cancel()
        keepaliveTimer = nil
    }

    private func armKeepaliveTimer() {
        keepaliveTimer?.cancel()
        keepaliveTimer = nil
        guard let deadline = keepalive?.nextDeadline else { return }
        let now = EventLoop.now()
        let delay = Duration.nanoseconds(Int64(clamping: deadline > now ? deadline - now : 0))
        // The timer holds the connection until it fires or ``stopKeepalive()`` (every way of
        // closing calls it) cancels it: no closure and no weak reference (which would give
        // every connection a side table) per idle connection.
        keepaliveTimer = loop.schedule(after: delay, target: self)
    }

    /// The keepalive or the authentication timer expired (``EventLoopTimerTarget``): both
    /// target the connection, so that neither needs a closure; the one that fired has let go
    /// of its target.
    nonisolated func timerFired() {
        Self.timerEntry(self, ())
    }

    private static let timerEntry = ConnectionLoopEntry<Void> { conn, _ in
        if conn.authenticationTimerFired {
            conn.authenticationTimerTick()
        }
        if conn.keepaliveTimer?.isCancelled ?? false {
            conn.keepaliveTimer = nil
            conn.keepaliveTick()
        }
    }

    private func keepaliveTick() {
        proto.releaseRecycledStorageIfIdle()
        guard !transportClosed, proto.state == .open, var machine = keepalive else { return }
        let action = machine.tick(now: EventLoop.now(), reading: channel.isReading)
        keepalive = machine
        switch action {
        case .sendPing(let payload)?:
            channel.append(exempt: true) { buffer in
                try? proto.writePing(payload: payload, into: &buffer, using: &rng)
            }
        case .timedOut?:
            fail(.timedOut("keepalive: no pong within \(configuration.pongTimeout)"), code: .internalError,
                 reason: "ping timeout")
            return
        case nil:
            break
        }
        armKeepaliveTimer()
    }

    private func receivedPong(_ payload: [UInt8]) {
        guard var machine = keepalive,
              let rtt = machine.receivedPong(payload, now: EventLoop.now()) else { return }  // unsolicited: ignored
        keepalive = machine
        lastPingRoundTripNanoseconds = Int64(clamping: rtt)
        counters?.pingAnswered(after: .nanoseconds(lastPingRoundTripNanoseconds))
        armKeepaliveTimer()
    }

}

extension WebSocketConnection: SocketChannelDelegate {
    nonisolated func channelRead(_ bytes: UnsafeRawBufferPointer) {
        // The buffer is only used synchronously, on this loop thread, during the call.
        Self.readEntry(self, bytes)
    }

    private static let readEntry = ConnectionLoopEntry<UnsafeRawBufferPointer> { $0.handleRead($1) }

    nonisolated func channelEOF() {
        Self.eofEntry(self, ())
    }

    private static let eofEntry = ConnectionLoopEntry<Void> { conn, _ in
        conn.channel.close()
        conn.transportDidClose()
    }

    nonisolated func channelFailed(_ error: SwitchboardError) {
        assumeIsolated { conn in
            if conn.error == nil && conn.proto.state != .closed { conn.error = error }
            conn.transportDidClose()
        }
    }

    nonisolated func channelPausedReadingForOutbound() {
        counters?.backpressurePaused()
    }

    /// The peer took none of our queued bytes for ``WebSocketConfiguration/writeStallTimeout``:
    /// the channel reset TCP and released its queue. Ends with 1006 (no close handshake could
    /// get through) and `.timedOut`, unless the close handshake had already completed.
    nonisolated func channelWriteStalled() {
        assumeIsolated { conn in
            conn.counters?.writeStallClosed()
            if conn.proto.state != .closed {
                let timeout = conn.configuration.writeStallTimeout ?? .zero
                conn.error = .timedOut("write (the peer took no bytes for \(timeout))")
                conn.closeStatus = WebSocketCloseStatus(code: .abnormalClosure, reason: "", error: nil)
            }
            conn.transportDidClose()
        }
    }

    nonisolated func channelWritable() {
        assumeIsolated { conn in
            let waiters = conn.sendWaiters
            conn.sendWaiters = []
            for w in waiters { w.resume() }
        }
    }
}
