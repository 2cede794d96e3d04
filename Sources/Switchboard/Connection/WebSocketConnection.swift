import Foundation
import Synchronization
import SwitchboardCore

/// One open WebSocket connection, client or server side.
///
/// An actor that runs on its connection's ``EventLoop`` (the loop is its executor), so bytes
/// read from the socket are parsed and delivered without a thread hop. It is the glue between
/// parts that each have one job:
/// - the protocol core (``WebSocketProtocol``) decides every RFC 6455 rule, the close
///   handshake included;
/// - the ``InboundQueue`` holds received messages for the application (reading stops above its
///   high-water mark: the peer's TCP window fills instead of our memory);
/// - the ``SocketChannel`` owns the one bounded outbound queue (reading also stops while it is
///   above its high-water mark, in both handler styles);
/// - ``WebSocketKeepalive`` decides when to ping and when the peer is dead;
/// - ``LineReader`` turns messages into lines for ``lines()``.
///
/// Receive with ``lines()`` (newline-delimited, one `Data` per line) **or** ``messages()`` /
/// ``receive()`` (whole messages): both draw from the same queue, so use one per connection.
/// The streams finish when the connection closes; ``closeStatus`` and ``error`` tell why.
public actor WebSocketConnection {
    /// A process-unique id, used in logs.
    public nonisolated let id: UInt64
    public nonisolated let role: WebSocketRole
    /// The subprotocol both sides agreed on, if any.
    public nonisolated let subprotocol: String?
    /// Server side: the upgrade request (path, query, headers). The fields only the handshake
    /// needed (`Upgrade`, `Connection`, `Sec-WebSocket-Key`, `-Version`, `-Extensions`) are not
    /// kept; `key`, `subprotocols` and `origin` hold their values.
    public nonisolated let request: WebSocketUpgradeRequest?
    /// Server side: what the authentication hook attached (e.g. the user id).
    public nonisolated let userInfo: [String: String]
    nonisolated let loop: EventLoop
    nonisolated let channel: SocketChannel
    /// The settings this connection runs with.
    public nonisolated var configuration: WebSocketConfiguration { sharedConfiguration.value }
    /// One copy per server (or client connection), not one per connection: memory per idle
    /// connection is what a connection keeps.
    private nonisolated let sharedConfiguration: SharedWebSocketConfiguration

    public nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    private var proto: WebSocketProtocol
    private var rng = SecureRandom()
    private var inbound: InboundQueue
    /// True from handing a message to the application until it asks for the next one.
    private var applicationHoldsMessage = false
    /// The state of ``lines()``, created on first use.
    private var lineReader: LineReader?
    /// Set for connections of a callback route: messages are handed to `onMessage` as they are
    /// parsed, and nothing is queued for `receive()`.
    private var callbacks: WebSocketCallbacks?

    private var keepalive: WebSocketKeepalive?
    private var keepaliveTimer: EventLoopTimer?
    /// The one closing timer: while the peer's close waits for the application to answer
    /// earlier messages (``closeReplyGrace``), then while waiting for the peer's close or the
    /// server's TCP close (``WebSocketConfiguration/closeTimeout``).
    private var closeTimer: EventLoopTimer?

    private var sendWaiters: [CheckedContinuation<Void, Never>] = []
    private var closeWaiters: [CheckedContinuation<Void, Never>] = []
    private var transportClosed = false
    private var closeHandlers: [@Sendable (WebSocketCloseStatus) -> Void] = []
    private let counters: ConnectionCounters?

    /// Why the connection ended (nil while open): the close code and reason from the close
    /// handshake, 1006 if the TCP connection ended without one, or the code we failed with.
    public private(set) var closeStatus: WebSocketCloseStatus?
    /// The error that ended the connection, if it did not end with a clean close handshake.
    public private(set) var error: SwitchboardError?
    /// Round-trip time of the last keepalive ping answered (nil until one has been).
    public private(set) var lastPingRoundTrip: Duration?

    /// Longest we hold our close reply while the application answers messages it already has
    /// (1 s: ample for an echo or an acknowledgement, short enough for the peer's close timer).
    static let closeReplyGrace: Duration = .seconds(1)

    private static let nextID = Atomic<UInt64>(1)

    init(channel: SocketChannel, role: WebSocketRole, subprotocol: String?, request: WebSocketUpgradeRequest?,
         configuration: WebSocketConfiguration, counters: ConnectionCounters? = nil,
         userInfo: [String: String] = [:]) {
        self.init(channel: channel, role: role, subprotocol: subprotocol, request: request,
                  sharedConfiguration: SharedWebSocketConfiguration(configuration), counters: counters,
                  userInfo: userInfo)
    }

    init(channel: SocketChannel, role: WebSocketRole, subprotocol: String?, request: WebSocketUpgradeRequest?,
         sharedConfiguration: SharedWebSocketConfiguration, counters: ConnectionCounters? = nil,
         userInfo: [String: String] = [:]) {
        let configuration = sharedConfiguration.value
        self.userInfo = userInfo
        self.id = Self.nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        self.channel = channel
        self.loop = channel.loop
        self.role = role
        self.subprotocol = subprotocol
        self.request = request
        self.sharedConfiguration = sharedConfiguration
        self.counters = counters
        self.proto = WebSocketProtocol(role: role, limits: configuration.protocolLimits)
        self.inbound = InboundQueue(highWaterMark: configuration.inboundHighWaterMark,
                                    lowWaterMark: configuration.inboundLowWaterMark)
        channel.highWaterMark = configuration.outboundHighWaterMark
        channel.lowWaterMark = configuration.outboundLowWaterMark
        channel.limit = configuration.outboundLimit
    }

    /// Takes over the channel (on the loop thread) and parses bytes that arrived with the handshake.
    /// With `callbacks`, messages go to them instead of the receive queue.
    nonisolated func start(leftover: [UInt8], callbacks: WebSocketCallbacks? = nil) {
        loop.assertInEventLoop()
        channel.delegate = self
        assumeIsolated { conn in
            conn.callbacks = callbacks
            conn.startKeepalive()
            callbacks?.onOpen?(conn)
            if !leftover.isEmpty {
                leftover.withUnsafeBytes { conn.handleRead($0) }
            }
        }
    }

    // MARK: Receiving

    /// One element per received line (split on `\n` or `\r\n`, terminator removed), lines
    /// spanning any number of messages. Finishes when the connection closes; a line longer than
    /// ``WebSocketConfiguration/maxLineLength`` fails the connection with 1009. Cancelling the
    /// consuming task finishes the stream and closes the connection with 1001.
    public nonisolated func lines() -> AsyncStream<Data> {
        AsyncStream(unfolding: { [self] in await self.nextLine() },
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
        applicationHoldsMessage = false          // asking for the next one: done with the last
        if let m = takeQueued() { return m }
        // The application has handled everything it had: a close held for it goes out now.
        if proto.state == .closeReceived { replyToClose() }
        guard mayReceiveMore else { return nil }
        if inbound.hasWaiter { throw .concurrentReceive }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<WebSocketMessage?, Never>) in
                if let m = takeQueued() {
                    c.resume(returning: m)
                } else if !mayReceiveMore || Task.isCancelled || !inbound.wait(c) {
                    c.resume(returning: nil)
                }
            }
        } onCancel: { [self] in
            loop.execute { self.assumeIsolated { $0.inbound.resumeWaiter() } }
        }
    }

    /// Messages received and not yet taken by the application.
    var queuedMessageCount: Int { inbound.count }
    /// Whether a task is waiting in ``receive()``.
    var hasWaitingReceiver: Bool { inbound.hasWaiter }

    /// Whether a message may still arrive: open, or our close sent and the peer's not yet in.
    private var mayReceiveMore: Bool { !transportClosed && (proto.state == .open || proto.state == .closing) }

    /// The next line (see ``lines()``).
    func nextLine() async -> Data? {
        let reader: LineReader
        if let lineReader {
            reader = lineReader
        } else {
            reader = LineReader(configuration: configuration)
            lineReader = reader
        }
        return await reader.next(from: self)
    }

    /// Called by ``LineReader`` when a line is longer than the limit.
    func failLineTooLong() {
        inbound.removeAll()
        fail(.limitExceeded("line longer than \(configuration.maxLineLength) bytes"), code: .messageTooBig,
             reason: "line too long")
    }

    private func takeQueued() -> WebSocketMessage? {
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
                if let callbacks {
                    // Handled (and answered) synchronously: nothing is held for the application.
                    callbacks.onMessage(self, message)
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
            if proto.state == .open { channel.setReading(false) }
        }
    }

    // MARK: Closing, driven by the core

    private func record(_ status: WebSocketCloseStatus) {
        if closeStatus == nil || status.error != nil { closeStatus = status }
        if let e = status.error, error == nil { error = .protocolViolation(e) }
    }

    /// The peer's close (or its protocol error) arrived while open. Messages it sent before may
    /// still be with the application, which may be about to answer them: our close waits until
    /// the application asks for a message with none left, at most ``closeReplyGrace``. With
    /// callbacks everything was answered synchronously, so the reply goes at once.
    private func closeReceived(_ status: WebSocketCloseStatus, applicationBusy deliveredNow: Bool) {
        stopKeepalive()
        // A protocol error also waits while the application is on a message it took earlier;
        // a normal close does not, so an idle application never delays the peer's close.
        let owes = callbacks == nil
            && (deliveredNow || !inbound.isEmpty || (applicationHoldsMessage && status.error != nil))
        guard owes else {
            replyToClose()
            return
        }
        inbound.resumeWaiter()
        closeTimer?.cancel()
        closeTimer = loop.schedule(after: Self.closeReplyGrace) { [weak self] in
            self?.assumeIsolated { $0.replyToClose() }
        }
    }

    /// Writes our close reply (state `.closeReceived`) and completes the handshake.
    private func replyToClose() {
        guard proto.state == .closeReceived, !transportClosed else { return }
        closeTimer?.cancel()
        closeTimer = nil
        if case .complete(let status) = writeClose(code: .normalClosure, reason: "") {
            closeHandshakeComplete(status)
        }
    }

    private func writeClose(code: WebSocketCloseCode, reason: String) -> WebSocketCloseProgress {
        var progress = WebSocketCloseProgress.alreadySent
        channel.append(exempt: true) { buffer in
            progress = (try? proto.writeClose(code: code, reason: reason, into: &buffer, using: &rng)) ?? .alreadySent
        }
        return progress
    }

    /// Both close frames are through (or the connection failed after ours): end the transport.
    private func closeHandshakeComplete(_ status: WebSocketCloseStatus) {
        record(status)
        stopKeepalive()
        closeTimer?.cancel()
        closeTimer = nil
        switch role {
        case .server:
            channel.closeAfterFlush(linger: configuration.closeTimeout)
            transportDidClose()
        case .client:
            // RFC 6455 §7.1.1: the server closes TCP first; wait for it (reading, to see it),
            // but not forever.
            channel.sendCloseNotify()
            channel.setReading(true)
            channel.flushNow()
            guard !channel.isClosed else {
                transportDidClose()
                return
            }
            closeTimer = loop.schedule(after: configuration.closeTimeout) { [weak self] in
                self?.assumeIsolated { conn in
                    conn.channel.close()
                    conn.transportDidClose()
                }
            }
        }
    }

    /// Marks the connection ended: wakes receivers (after queued messages), senders and closers.
    private func transportDidClose() {
        guard !transportClosed else { return }
        transportClosed = true
        stopKeepalive()
        closeTimer?.cancel()
        closeTimer = nil
        if closeStatus == nil {
            closeStatus = proto.transportClosed()
        } else {
            _ = proto.transportClosed()
        }
        inbound.resumeWaiter()
        let senders = sendWaiters
        sendWaiters = []
        for s in senders { s.resume() }
        let closers = closeWaiters
        closeWaiters = []
        for c in closers { c.resume() }
        if let onClose = callbacks?.onClose {
            callbacks = nil
            onClose(self)
        }
        let status = closeStatus ?? WebSocketCloseStatus(code: .abnormalClosure, reason: "", error: nil)
        let handlers = closeHandlers
        closeHandlers = []
        for h in handlers { h(status) }
        counters?.connectionClosed()
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

    private func stopKeepalive() {
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
        keepaliveTimer = loop.schedule(after: delay) { [weak self] in
            self?.assumeIsolated { $0.keepaliveTick() }
        }
    }

    private func keepaliveTick() {
        guard !transportClosed, proto.state == .open, var machine = keepalive else { return }
        let action = machine.tick(now: EventLoop.now())
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
        lastPingRoundTrip = .nanoseconds(Int64(clamping: rtt))
        armKeepaliveTimer()
    }

    // MARK: Sending

    /// Sends a text message. Waits while the outbound queue is above its high-water mark
    /// (or throws, per ``WebSocketConfiguration/sendPolicy``); throws `.closed` once closing.
    public func send(text: String) async throws(SwitchboardError) {
        try await waitUntilWritable()
        var text = text
        try text.withUTF8 { buf in
            Result { () throws(SwitchboardError) in _ = try enqueue(.text, UnsafeRawBufferPointer(buf), exempt: true) }
        }.get()
    }

    /// Sends a binary message.
    public func send(binary: Data) async throws(SwitchboardError) {
        try await waitUntilWritable()
        try binary.withUnsafeBytes { buf in
            Result { () throws(SwitchboardError) in _ = try enqueue(.binary, buf, exempt: true) }
        }.get()
    }

    /// Sends a message.
    public func send(_ message: WebSocketMessage) async throws(SwitchboardError) {
        try await waitUntilWritable()
        _ = try enqueue(message, exempt: true)
    }

    private func waitUntilWritable() async throws(SwitchboardError) {
        try checkOpen()
        guard !channel.isWritable else { return }
        if configuration.sendPolicy == .fail {
            throw .limitExceeded("outbound queue above \(configuration.outboundHighWaterMark) bytes",
                                 closeCode: .tryAgainLater)
        }
        while !channel.isWritable {
            try checkOpen()
            channel.requestWritableSignal()
            await withCheckedContinuation { sendWaiters.append($0) }
        }
        try checkOpen()
    }

    private func enqueue(_ message: WebSocketMessage, exempt: Bool) throws(SwitchboardError) -> OutboundStatus {
        switch message {
        case .text(let b):
            return try b.withUnsafeBytes { buf in
                Result { () throws(SwitchboardError) in try enqueue(.text, buf, exempt: exempt) }
            }.get()
        case .binary(let b):
            return try b.withUnsafeBytes { buf in
                Result { () throws(SwitchboardError) in try enqueue(.binary, buf, exempt: exempt) }
            }.get()
        }
    }

    /// Frames one message into the outbound queue. `exempt`: the sender already waited for room
    /// (so the queue holds at most the high-water mark plus this message); otherwise the queue's
    /// hard ``WebSocketConfiguration/outboundLimit`` applies.
    private func enqueue(_ opcode: WebSocketOpcode, _ payload: UnsafeRawBufferPointer,
                         exempt: Bool) throws(SwitchboardError) -> OutboundStatus {
        var refused: WebSocketStateError?
        let status = channel.append(exempt: exempt) { buffer in
            do throws(WebSocketStateError) {
                try proto.writeMessage(opcode, payload: payload, into: &buffer, using: &rng)
            } catch {
                refused = error
            }
        }
        if status == .overLimit {
            throw .limitExceeded("outbound queue above its limit of \(configuration.outboundLimit) bytes",
                                 closeCode: .tryAgainLater)
        }
        switch refused {
        case .notOpen?: throw closedError()
        case .invalidArgument?: throw .invalidArgument("text message is not valid UTF-8")
        case nil: break
        }
        counters?.messageOut(bytes: payload.count)
        return status
    }

    /// Queues a message at once, without waiting for room in the outbound queue: for callback
    /// routes (``WebSocketCallbacks``), where the connection stops reading while the queue is
    /// above its high-water mark, and for code that bounds its own sending.
    ///
    /// - Returns: ``WebSocketSendStatus/backpressure`` once the queue is above its high-water
    ///   mark: stop producing until it drains.
    /// - Throws: `.closed` once closing; `.limitExceeded` (close code 1013), with nothing
    ///   queued, when the queue already holds more than ``WebSocketConfiguration/outboundLimit``.
    @discardableResult
    public func sendNow(_ message: WebSocketMessage) throws(SwitchboardError) -> WebSocketSendStatus {
        try checkOpen()
        return try enqueue(message, exempt: false) == .queued ? .queued : .backpressure
    }

    /// Queues a message without waiting, for fan-out (topics): a subscriber whose outbound queue
    /// is above its high-water mark is closed with 1013 instead of growing its buffer or
    /// blocking the publisher. Returns whether the message was queued.
    @discardableResult
    func trySend(_ opcode: WebSocketOpcode, _ payload: UnsafeRawBufferPointer) -> Bool {
        guard isOpen else { return false }
        if !channel.isWritable {
            counters?.slowConsumerClosed()
            startClose(code: .tryAgainLater, reason: "slow consumer")
            return false
        }
        return (try? enqueue(opcode, payload, exempt: true)) != nil
    }

    /// Sends a ping with up to 125 bytes of payload.
    ///
    /// - Throws: `.invalidArgument` over 125 bytes; `.closed` once closing; `.limitExceeded`
    ///   when the outbound queue already holds more than ``WebSocketConfiguration/outboundLimit``.
    public func ping(_ payload: [UInt8] = []) throws(SwitchboardError) {
        try checkOpen()
        guard payload.count <= 125 else { throw .invalidArgument("ping payload longer than 125 bytes") }
        var refused = false
        let status = channel.append { buffer in
            do throws(WebSocketStateError) {
                try proto.writePing(payload: payload, into: &buffer, using: &rng)
            } catch {
                refused = true
            }
        }
        if status == .overLimit {
            throw .limitExceeded("outbound queue above its limit of \(configuration.outboundLimit) bytes",
                                 closeCode: .tryAgainLater)
        }
        if refused { throw closedError() }
    }

    private func checkOpen() throws(SwitchboardError) {
        if !isOpen { throw closedError() }
    }

    private func closedError() -> SwitchboardError {
        if let error { return error }
        if let s = closeStatus { return .closed(code: s.code, reason: s.reason) }
        return .closed(code: .normalClosure, reason: "closing")
    }

    // MARK: Closing, asked by the application

    /// Starts the close handshake (if not already started) and waits until the connection has
    /// closed: as soon as the handshake completes (a client also waits for the server to close
    /// TCP), and at most ``WebSocketConfiguration/closeTimeout`` after which TCP is dropped.
    /// Messages still queued for the application stay readable; messages that arrive after our
    /// close frame while the receive queue is above its high-water mark are dropped (RFC 6455
    /// §7.1.4), so an application that stopped reading never stalls its own close.
    /// Idempotent: later calls just wait for the same end.
    public func close(code: WebSocketCloseCode = .normalClosure, reason: String = "") async {
        startClose(code: code, reason: reason)
        if transportClosed { return }
        await withCheckedContinuation { closeWaiters.append($0) }
    }

    /// Starts the close handshake without waiting. If the peer's close is already in (held for
    /// the application), this sends the reply instead.
    func startClose(code: WebSocketCloseCode, reason: String) {
        guard !transportClosed else { return }
        switch proto.state {
        case .closeReceived:
            replyToClose()
        case .open:
            stopKeepalive()
            _ = writeClose(code: code.isSendable ? code : .normalClosure, reason: reason)
            // The peer's close must get through even if the application stopped reading.
            channel.setReading(true)
            closeTimer?.cancel()
            closeTimer = loop.schedule(after: configuration.closeTimeout) { [weak self] in
                self?.assumeIsolated { conn in
                    conn.error = conn.error ?? .timedOut("close handshake")
                    conn.channel.close()
                    conn.transportDidClose()
                }
            }
        case .closing, .closed:
            break
        }
    }

    /// Fails the connection from our side (e.g. a limit of this layer was exceeded).
    private func fail(_ error: SwitchboardError, code: WebSocketCloseCode, reason: String) {
        if self.error == nil { self.error = error }
        if closeStatus == nil { closeStatus = WebSocketCloseStatus(code: code, reason: reason, error: nil) }
        startClose(code: code, reason: reason)
    }

    /// Registers a callback run once when the connection has closed.
    func onClose(_ handler: @escaping @Sendable (WebSocketCloseStatus) -> Void) {
        if transportClosed {
            handler(closeStatus ?? WebSocketCloseStatus(code: .abnormalClosure, reason: "", error: nil))
        } else {
            closeHandlers.append(handler)
        }
    }

    /// Whether the connection is still open for sending (also after the peer's close, until our
    /// reply is written).
    public var isOpen: Bool { !transportClosed && proto.canSend }

    /// Closes TCP at once, without a close handshake.
    func abort() {
        channel.close()
        transportDidClose()
    }
}

extension WebSocketConnection: SocketChannelDelegate {
    nonisolated func channelRead(_ bytes: UnsafeRawBufferPointer) {
        // Safety: the buffer is only used synchronously, on this loop thread, during the call.
        nonisolated(unsafe) let bytes = bytes
        assumeIsolated { $0.handleRead(bytes) }
    }

    nonisolated func channelEOF() {
        assumeIsolated { conn in
            conn.channel.close()
            conn.transportDidClose()
        }
    }

    nonisolated func channelFailed(_ error: SwitchboardError) {
        assumeIsolated { conn in
            if conn.error == nil && conn.proto.state != .closed { conn.error = error }
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

extension WebSocketMessage {
    /// Payload size in bytes.
    public var payloadCount: Int {
        switch self {
        case .text(let b), .binary(let b): return b.count
        }
    }

    /// The text of a text message (nil for binary).
    public var text: String? {
        if case .text(let b) = self { return String(decoding: b, as: UTF8.self) }
        return nil
    }

    /// The payload as `Data`.
    public var data: Data {
        switch self {
        case .text(let b), .binary(let b): return Data(b)
        }
    }
}
