import Foundation
import SwitchboardCore

/// Sending: every frame goes through the channel's one bounded outbound queue.
extension WebSocketConnection {
    // MARK: Sending

    /// Sends a text message. Waits while the outbound queue is above its high-water mark
    /// (or throws, per ``WebSocketConfiguration/sendPolicy``); throws `.closed` once closing.
    public func send(text: String) async throws(SwitchboardError) {
        if !(isOpen && channel.isWritable) { try await waitUntilWritable() }
        var text = text
        try text.withUTF8 { buf in
            Result { () throws(SwitchboardError) in _ = try enqueue(.text, UnsafeRawBufferPointer(buf), exempt: true) }
        }.get()
    }

    /// Queues text messages sent from another thread (``SocketAdapter``'s batched commands), in
    /// order, as `send(text:)` would once it found room; messages for a connection no longer
    /// open are dropped. Returns whether the outbound queue is still at or below its high-water
    /// mark.
    func queueTexts(_ texts: [String]) -> Bool {
        for var text in texts {
            guard isOpen else { return false }
            let queued = text.withUTF8 { buf in
                (try? enqueue(.text, UnsafeRawBufferPointer(buf), exempt: true)) != nil
            }
            if !queued { return false }
        }
        return isOpen && channel.isWritable
    }

    /// Sends a binary message.
    public func send(binary: Data) async throws(SwitchboardError) {
        if !(isOpen && channel.isWritable) { try await waitUntilWritable() }
        try binary.withUnsafeBytes { buf in
            Result { () throws(SwitchboardError) in _ = try enqueue(.binary, buf, exempt: true) }
        }.get()
    }

    /// Sends a message.
    public func send(_ message: WebSocketMessage) async throws(SwitchboardError) {
        if !(isOpen && channel.isWritable) { try await waitUntilWritable() }
        _ = try enqueue(message, exempt: true)
    }

    /// Waits for room (or throws). The senders call it only when there is no room or the
    /// connection is closing: an async call costs a frame, and the common case needs none.
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

    /// Payloads from this size up are queued by reference by a server (its frames are unmasked):
    /// the array goes to the socket as it is, instead of being copied behind its header.
    static let byReferenceThreshold = 16 << 10

    private func enqueue(_ message: WebSocketMessage, exempt: Bool) throws(SwitchboardError) -> OutboundStatus {
        let (opcode, bytes): (WebSocketOpcode, [UInt8]) = switch message {
        case .text(let b): (.text, b)
        case .binary(let b): (.binary, b)
        }
        let reference = role == .server && bytes.count >= Self.byReferenceThreshold ? bytes : nil
        return try bytes.withUnsafeBytes { buf in
            Result { () throws(SwitchboardError) in try enqueue(opcode, buf, reference: reference, exempt: exempt) }
        }.get()
    }

    /// Frames one message into the outbound queue. `exempt`: the sender already waited for room
    /// (so the queue holds at most the high-water mark plus this message); otherwise the queue's
    /// hard ``WebSocketConfiguration/outboundLimit`` applies. `reference`: the payload's own
    /// array, queued after a header instead of copied (server role).
    private func enqueue(_ opcode: WebSocketOpcode, _ payload: UnsafeRawBufferPointer, reference: [UInt8]? = nil,
                         exempt: Bool) throws(SwitchboardError) -> OutboundStatus {
        var refused: WebSocketStateError?
        let status: OutboundStatus
        if let reference {
            // A refused header throws out of the append, so the payload is never queued alone.
            do throws(WebSocketStateError) {
                status = try channel.append(exempt: exempt, header: { (buffer: inout [UInt8]) throws(WebSocketStateError) in
                    try proto.writeMessageHeader(opcode, payload: payload, into: &buffer)
                }, payload: reference)
            } catch {
                refused = error
                status = .queued
            }
        } else {
            status = channel.append(exempt: exempt) { buffer in
                do throws(WebSocketStateError) {
                    try proto.writeMessage(opcode, payload: payload, into: &buffer, using: &rng)
                } catch {
                    refused = error
                }
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

    /// Queues a data frame serialized once for every subscriber of a topic (server frames are
    /// unmasked, so identical), without waiting: a subscriber whose outbound queue is above its
    /// high-water mark is closed with 1013 instead of growing its buffer or blocking the
    /// publisher. Returns whether the frame was queued.
    func trySend(frame: UnsafeRawBufferPointer, payloadCount: Int) -> Bool {
        guard role == .server, isOpen else { return false }
        if !channel.isWritable {
            counters?.slowConsumerClosed()
            startClose(code: .tryAgainLater, reason: "slow consumer")
            return false
        }
        channel.append(frame)
        counters?.messageOut(bytes: payloadCount)
        return true
    }

    /// Sends a ping with up to 125 bytes of payload.
    ///
    /// - Throws: `.invalidArgument` over 125 bytes; `.closed` once closing; `.limitExceeded`
    ///   when the outbound queue already holds more than ``WebSocketConfiguration/outboundLimit``.
    public func ping(_ payload: Data = Data()) throws(SwitchboardError) {
        try checkOpen()
        guard payload.count <= 125 else { throw .invalidArgument("ping payload longer than 125 bytes") }
        let payload = [UInt8](payload)
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
}
