import Logging
import SwitchboardCore

/// The close handshake: what the core decided (the peer closed, or broke the protocol) and
/// what the application asked (close, or a limit of this layer failed the connection).
extension WebSocketConnection {
    // MARK: Closing, driven by the core

    func record(_ status: WebSocketCloseStatus) {
        if closeStatus == nil || status.error != nil { closeStatus = status }
        if let e = status.error, error == nil { error = .protocolViolation(e) }
    }

    /// The peer's close (or its protocol error) arrived while open. Messages it sent before may
    /// still be with the application, which may be about to answer them: our close waits until
    /// the application asks for a message with none left, at most ``closeReplyGrace``. With
    /// callbacks everything was answered synchronously, so the reply goes at once.
    func closeReceived(_ status: WebSocketCloseStatus, applicationBusy deliveredNow: Bool) {
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
    func replyToClose() {
        guard proto.state == .closeReceived, !transportClosed else { return }
        closeTimer?.cancel()
        closeTimer = nil
        if case .complete(let status) = writeClose(code: .normalClosure, reason: "") {
            closeHandshakeComplete(status)
        }
    }

    func writeClose(code: WebSocketCloseCode, reason: String) -> WebSocketCloseProgress {
        var progress = WebSocketCloseProgress.alreadySent
        channel.append(exempt: true) { buffer in
            progress = (try? proto.writeClose(code: code, reason: reason, into: &buffer, using: &rng)) ?? .alreadySent
        }
        return progress
    }

    /// Both close frames are through (or the connection failed after ours): end the transport.
    func closeHandshakeComplete(_ status: WebSocketCloseStatus) {
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
    func transportDidClose() {
        guard !transportClosed else { return }
        transportClosed = true
        stopKeepalive()
        stopAuthenticationExpiry()
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
            callbacksBox = nil
            onClose(self)
        }
        let status = closeStatus ?? WebSocketCloseStatus(code: .abnormalClosure, reason: "", error: nil)
        let handlers = closeHandlers
        closeHandlers = []
        for h in handlers { h(status) }
        counters?.logger.debug("connection closed", metadata: [
            "connection": "\(id)", "role": "\(role)", "code": "\(status.code.rawValue)",
            "error": "\(error.map { "\($0)" } ?? "none")",
        ])
        counters?.connectionClosed(self, status: status)
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
    func fail(_ error: SwitchboardError, code: WebSocketCloseCode, reason: String) {
        counters?.logger.debug("failing connection", metadata: ["connection": "\(id)", "code": "\(code.rawValue)",
                                                                "error": "\(error)"])
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
