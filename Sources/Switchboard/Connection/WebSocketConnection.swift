import Foundation
import Synchronization
import SwitchboardCore

/// One open WebSocket connection, client or server side.
///
/// An actor that runs on its connection's ``EventLoop`` (the loop is its executor), so bytes
/// read from the socket are parsed and delivered without a thread hop. It owns the protocol
/// state machine, a bounded inbound queue (reading stops above the high-water mark: the peer's
/// TCP window fills instead of our memory), and the outbound queue.
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
    private var inbound = RingBuffer<WebSocketMessage>()
    private var inboundBytes = 0
    private var lineBuffer: LineBuffer
    private var messageWaiter: CheckedContinuation<WebSocketMessage?, Never>?
    private var sendWaiters: [CheckedContinuation<Void, Never>] = []
    private var closeWaiters: [CheckedContinuation<Void, Never>] = []
    private var closeTimer: EventLoopTimer?
    private var transportClosed = false
    private var closeHandlers: [@Sendable (WebSocketCloseStatus) -> Void] = []
    private let counters: ConnectionCounters?

    /// Why the connection ended (nil while open): the close code and reason from the close
    /// handshake, 1006 if the TCP connection ended without one, or the code we failed with.
    public private(set) var closeStatus: WebSocketCloseStatus?
    /// The error that ended the connection, if it did not end with a clean close handshake.
    public private(set) var error: SwitchboardError?

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
        self.lineBuffer = LineBuffer(maxLineLength: configuration.maxLineLength, emptyLines: configuration.emptyLines)
        channel.highWaterMark = configuration.outboundHighWaterMark
        channel.lowWaterMark = configuration.outboundLowWaterMark
    }

    /// Takes over the channel (on the loop thread) and parses bytes that arrived with the handshake.
    /// With `callbacks`, messages go to them instead of the receive queue.
    nonisolated func start(leftover: [UInt8], callbacks: WebSocketCallbacks? = nil) {
        loop.assertInEventLoop()
        channel.delegate = self
        assumeIsolated { conn in
            conn.callbacks = callbacks
            conn.scheduleKeepalive()
            callbacks?.onOpen?(conn)
            if !leftover.isEmpty {
                leftover.withUnsafeBytes { conn.handleRead($0) }
            }
        }
    }

    /// Set for connections of a callback route: messages are handed to `onMessage` as they are
    /// parsed, and nothing is queued for `receive()`.
    private var callbacks: WebSocketCallbacks?
    /// Callback mode: reading is paused until the outbound queue drains below its low-water mark.
    private var pausedForOutbound = false

    // MARK: Keepalive

    private var keepaliveTimer: EventLoopTimer?
    private var pongDeadline: EventLoopTimer?
    private var outstandingPing: (payload: [UInt8], sentAt: UInt64)?
    private var pingCounter: UInt64 = 0

    /// Round-trip time of the last keepalive ping answered (nil until one has been).
    public private(set) var lastPingRoundTrip: Duration?

    private func scheduleKeepalive() {
        guard let interval = configuration.pingInterval, !transportClosed else { return }
        keepaliveTimer = loop.schedule(after: interval) { [weak self] in
            self?.assumeIsolated { $0.sendKeepalivePing() }
        }
    }

    private func sendKeepalivePing() {
        guard !transportClosed, proto.state == .open else { return }
        if outstandingPing == nil {
            pingCounter &+= 1
            let payload = withUnsafeBytes(of: pingCounter.bigEndian) { Array($0) }
            do {
                try proto.writePing(payload: payload, into: &channel.sendBuffer, using: &rng)
            } catch {
                return
            }
            channel.flushSoon()
            outstandingPing = (payload, EventLoop.now())
            pongDeadline = loop.schedule(after: configuration.pongTimeout) { [weak self] in
                self?.assumeIsolated { conn in
                    conn.fail(.timedOut("keepalive: no pong within \(conn.configuration.pongTimeout)"),
                              code: .internalError, reason: "ping timeout")
                }
            }
        }
        scheduleKeepalive()
    }

    private func receivedPong(_ payload: [UInt8]) {
        guard let ping = outstandingPing, ping.payload == payload else { return }  // unsolicited: ignored
        outstandingPing = nil
        pongDeadline?.cancel()
        pongDeadline = nil
        let elapsed = EventLoop.now() &- ping.sentAt
        lastPingRoundTrip = .nanoseconds(Int64(clamping: elapsed))
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
    /// consuming task finishes the sequence and closes the connection with 1001.
    public nonisolated func messages() -> WebSocketMessageSequence {
        WebSocketMessageSequence(connection: self)
    }

    /// The next whole message, or nil once the connection has closed and every received message
    /// has been delivered.
    public func receive() async -> WebSocketMessage? {
        applicationHoldsMessage = false          // asking for the next one: done with the last
        if let m = dequeue() { return m }
        if pendingClose != nil { runPendingClose() }
        if transportClosed || proto.state == .closed { return nil }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<WebSocketMessage?, Never>) in
                if let m = dequeue() {
                    c.resume(returning: m)
                } else if transportClosed || Task.isCancelled {
                    c.resume(returning: nil)
                } else {
                    messageWaiter = c
                }
            }
        } onCancel: { [self] in
            loop.execute { self.assumeIsolated { $0.resumeMessageWaiter(nil) } }
        }
    }

    /// The next line, or nil at the end (a final unterminated line is delivered first).
    func nextLine() async -> Data? {
        while true {
            if let line = lineBuffer.nextLine() { return Data(line) }
            guard let message = await receive() else {
                if let rest = lineBuffer.finish() { return Data(rest) }
                return nil
            }
            do {
                switch message {
                case .text(let bytes), .binary(let bytes): try lineBuffer.append(bytes)
                }
            } catch {
                fail(.limitExceeded("line longer than \(configuration.maxLineLength) bytes"), code: .messageTooBig,
                     reason: "line too long")
                lineBuffer = LineBuffer(maxLineLength: configuration.maxLineLength, emptyLines: configuration.emptyLines)
                inbound.removeAll()
                inboundBytes = 0
                return nil
            }
        }
    }

    private func dequeue() -> WebSocketMessage? {
        guard let m = inbound.popFirst() else { return nil }
        applicationHoldsMessage = true
        inboundBytes -= m.payloadCount
        if inboundBytes <= configuration.inboundLowWaterMark && !transportClosed && pendingClose == nil {
            channel.setReading(true)
        }
        return m
    }

    private func resumeMessageWaiter(_ m: WebSocketMessage?) {
        guard let w = messageWaiter else { return }
        messageWaiter = nil
        w.resume(returning: m)
    }

    fileprivate func handleRead(_ bytes: UnsafeRawBufferPointer) {
        counters?.bytesIn(bytes.count)
        var offset = 0
        // Control replies produced after a message of this batch are held until the end of the
        // batch, so that a close reply can wait for the application (see `pendingClose`).
        var delivered = false
        var held: [[UInt8]] = []
        while let action = proto.nextAction(in: bytes, offset: &offset, using: &rng) {
            switch action {
            case .message(let message):
                counters?.messageIn()
                if let callbacks {
                    // Handled (and answered) synchronously: nothing is held for the application.
                    callbacks.onMessage(self, message)
                    if !channel.isWritable && !pausedForOutbound && !transportClosed {
                        pausedForOutbound = true
                        channel.setReading(false)
                        channel.requestWritableSignal()
                    }
                    continue
                }
                delivered = true
                if let w = messageWaiter, inbound.isEmpty {
                    messageWaiter = nil
                    applicationHoldsMessage = true
                    w.resume(returning: message)
                } else {
                    inbound.append(message)
                    inboundBytes += message.payloadCount
                    if inboundBytes > configuration.inboundHighWaterMark {
                        channel.setReading(false)
                    }
                }
            case .write(let frame):
                if delivered || !inbound.isEmpty || applicationHoldsMessage {
                    held.append(frame)
                } else {
                    channel.write(frame)
                }
            case .pong(let payload):
                receivedPong(payload)
            case .ping:
                break
            case .peerClosed(let status):
                if closeStatus == nil { closeStatus = status }
            case .closeTransport(let status):
                // A protocol error also waits while the application is still on a message it
                // took earlier (it may be about to answer it); a normal close does not, so an
                // idle application never delays the peer's close.
                if delivered || !inbound.isEmpty || (applicationHoldsMessage && status.error != nil) {
                    // Messages that arrived before the close (or the protocol error) are still
                    // with the application: let it handle them, and answer them, before our
                    // close frame goes out. Done when it next asks for a message and the queue
                    // is empty, or after `closeReplyGrace` at the latest.
                    pendingClose = (held, status)
                    channel.setReading(false)
                    pendingCloseTimer = loop.schedule(after: Self.closeReplyGrace) { [weak self] in
                        self?.assumeIsolated { $0.runPendingClose() }
                    }
                    return
                }
                for frame in held { channel.write(frame) }
                held = []
                protocolFinished(status)
            }
        }
        for frame in held { channel.write(frame) }
    }

    private var pendingClose: (writes: [[UInt8]], status: WebSocketCloseStatus)?
    /// True from handing a message to the application until it asks for the next one.
    private var applicationHoldsMessage = false
    /// Longest we hold our close frame for the application to answer messages it already has
    /// (1 s: ample for an echo or an acknowledgement, short enough for the peer's close timer).
    static let closeReplyGrace: Duration = .seconds(1)
    private var pendingCloseTimer: EventLoopTimer?

    private func runPendingClose() {
        guard let p = pendingClose else { return }
        pendingClose = nil
        pendingCloseTimer?.cancel()
        pendingCloseTimer = nil
        for frame in p.writes { channel.write(frame) }
        protocolFinished(p.status)
    }

    private func protocolFinished(_ status: WebSocketCloseStatus) {
        if closeStatus == nil || status.error != nil { closeStatus = status }
        if let e = status.error, error == nil { error = .protocolViolation(e) }
        switch role {
        case .server:
            channel.closeAfterFlush()
            transportDidClose()
        case .client:
            // RFC 6455 §7.1.1: the server closes TCP first; wait for it, but not forever.
            channel.flushNow()
            if !channel.isClosed {
                closeTimer?.cancel()
                closeTimer = loop.schedule(after: configuration.closeTimeout) { [weak self] in
                    guard let self else { return }
                    self.assumeIsolated { conn in
                        conn.channel.close()
                        conn.transportDidClose()
                    }
                }
            } else {
                transportDidClose()
            }
        }
    }

    /// Marks the connection ended: wakes receivers (after queued messages), senders and closers.
    private func transportDidClose() {
        guard !transportClosed else { return }
        transportClosed = true
        closeTimer?.cancel()
        closeTimer = nil
        keepaliveTimer?.cancel()
        keepaliveTimer = nil
        pongDeadline?.cancel()
        pongDeadline = nil
        pendingCloseTimer?.cancel()
        pendingCloseTimer = nil
        if closeStatus == nil {
            closeStatus = proto.transportClosed()
        }
        if inbound.isEmpty { resumeMessageWaiter(nil) }
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

    // MARK: Sending

    /// Sends a text message. Waits while the outbound queue is above its high-water mark
    /// (or throws, per ``WebSocketConfiguration/sendPolicy``); throws `.closed` once closing.
    public func send(text: String) async throws(SwitchboardError) {
        try await waitUntilWritable()
        var text = text
        try text.withUTF8 { buf in
            Result { () throws(SwitchboardError) in try enqueue(.text, UnsafeRawBufferPointer(buf)) }
        }.get()
    }

    /// Sends a binary message.
    public func send(binary: Data) async throws(SwitchboardError) {
        try await waitUntilWritable()
        try binary.withUnsafeBytes { buf in
            Result { () throws(SwitchboardError) in try enqueue(.binary, buf) }
        }.get()
    }

    /// Sends a message.
    public func send(_ message: WebSocketMessage) async throws(SwitchboardError) {
        try await waitUntilWritable()
        try sendNow(message)
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

    private func enqueue(_ opcode: WebSocketOpcode, _ bytes: [UInt8]) throws(SwitchboardError) {
        try bytes.withUnsafeBytes { buf in
            Result { () throws(SwitchboardError) in try enqueue(opcode, buf) }
        }.get()
    }

    private func enqueue(_ opcode: WebSocketOpcode, _ payload: UnsafeRawBufferPointer) throws(SwitchboardError) {
        if pendingClose != nil {
            // The core has seen the peer's close (or error) but our close frame is held back
            // until the application answered earlier messages: frame the answer directly.
            let key: WebSocketMaskingKey? = role == .client ? WebSocketMaskingKey(using: &rng) : nil
            WebSocketFrameSerializer.writeFrame(opcode: opcode, payload: payload, maskingKey: key,
                                                into: &channel.sendBuffer)
        } else {
            do {
                try proto.writeMessage(opcode, payload: payload, into: &channel.sendBuffer, using: &rng)
            } catch {
                throw closedError()
            }
        }
        counters?.messageOut(bytes: payload.count)
        channel.flushSoon()
    }

    /// Queues a message at once, without waiting for room in the outbound queue: for callback
    /// routes (``WebSocketCallbacks``), where the connection stops reading while the queue is
    /// above its high-water mark, and for code that bounds its own sending. Throws `.closed`
    /// once closing.
    public func sendNow(_ message: WebSocketMessage) throws(SwitchboardError) {
        try checkOpen()
        switch message {
        case .text(let b): try enqueue(.text, b)
        case .binary(let b): try enqueue(.binary, b)
        }
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
        return (try? enqueue(opcode, payload)) != nil
    }

    /// Sends a ping with up to 125 bytes of payload.
    public func ping(_ payload: [UInt8] = []) throws(SwitchboardError) {
        try checkOpen()
        guard payload.count <= 125 else { throw .invalidArgument("ping payload longer than 125 bytes") }
        do {
            try proto.writePing(payload: payload, into: &channel.sendBuffer, using: &rng)
        } catch {
            throw closedError()
        }
        channel.flushSoon()
    }

    private func checkOpen() throws(SwitchboardError) {
        if !isOpen { throw closedError() }
    }

    private func closedError() -> SwitchboardError {
        if let error { return error }
        if let s = closeStatus { return .closed(code: s.code, reason: s.reason) }
        return .closed(code: .normalClosure, reason: "closing")
    }

    // MARK: Closing

    /// Starts the close handshake (if not already started) and waits until the connection has
    /// closed, at most ``WebSocketConfiguration/closeTimeout`` after which TCP is dropped.
    /// Idempotent: later calls just wait for the same end.
    public func close(code: WebSocketCloseCode = .normalClosure, reason: String = "") async {
        startClose(code: code, reason: reason)
        if transportClosed { return }
        await withCheckedContinuation { closeWaiters.append($0) }
    }

    /// Starts the close handshake without waiting.
    func startClose(code: WebSocketCloseCode, reason: String) {
        if pendingClose != nil { runPendingClose() }
        guard !transportClosed, proto.state == .open else { return }
        let code = code.isSendable ? code : .normalClosure
        _ = try? proto.writeClose(code: code, reason: reason, into: &channel.sendBuffer, using: &rng)
        channel.flushSoon()
        closeTimer?.cancel()
        closeTimer = loop.schedule(after: configuration.closeTimeout) { [weak self] in
            guard let self else { return }
            self.assumeIsolated { conn in
                conn.error = conn.error ?? .timedOut("close handshake")
                conn.channel.close()
                conn.transportDidClose()
            }
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

    /// Whether the connection is still open for sending.
    public var isOpen: Bool { !transportClosed && (proto.state == .open || pendingClose != nil) }

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
            if conn.pausedForOutbound {
                conn.pausedForOutbound = false
                if !conn.transportClosed && conn.pendingClose == nil { conn.channel.setReading(true) }
            }
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
