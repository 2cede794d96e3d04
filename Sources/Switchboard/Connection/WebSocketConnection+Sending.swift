import Foundation
import SwitchboardCore

/// Sending: every frame goes through the channel's one bounded outbound queue.
extension WebSocketConnection {
    // MARK: Sending

    /// Sends a text message. Waits while the outbound queue is above its high-water mark
    /// (or throws, per ``WebSocketConfiguration/sendPolicy``); throws `.closed` once closing.
    ///
    /// `compress`: with permessage-deflate negotiated, false sends this message uncompressed
    /// (e.g. one that mixes a secret with attacker-influenced data, see <doc:Compression>). Messages below the configured threshold are never
    /// compressed.
    ///
    /// Called from code isolated to this connection (a server route handler), it queues the
    /// message without an executor switch when there is room; from anywhere else it runs on the
    /// connection's loop, as any of its methods.
    nonisolated(nonsending)
    public func send(text: String, compress: Bool = true) async throws(SwitchboardError) {
        let caller: (any Actor)? = #isolation
        if caller === self, try Self.sendTextIfRoom(self, (text, compress)) { return }
        try await sendWaiting(text: text, compress: compress)
    }

    private static let sendTextIfRoom = ConnectionLoopCall<(String, Bool), Bool, SwitchboardError> {
        (connection: isolated WebSocketConnection, arguments) throws(SwitchboardError) -> Bool in
        guard connection.isOpen && connection.channel.isWritable else { return false }
        try connection.enqueue(text: arguments.0, compress: arguments.1)
        return true
    }

    private func sendWaiting(text: String, compress: Bool) async throws(SwitchboardError) {
        if !(isOpen && channel.isWritable) { try await waitUntilWritable() }
        try enqueue(text: text, compress: compress)
    }

    /// Queues a text message (its room checked, or waited for, by the caller).
    private func enqueue(text: String, compress: Bool) throws(SwitchboardError) {
        var text = text
        try text.withUTF8 { buf in
            Result { () throws(SwitchboardError) in
                _ = try enqueue(.text, UnsafeRawBufferPointer(buf), exempt: true, compress: compress)
            }
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

    /// Sends a binary message (`compress` and executor as for ``send(text:compress:)``).
    nonisolated(nonsending)
    public func send(binary: Data, compress: Bool = true) async throws(SwitchboardError) {
        let caller: (any Actor)? = #isolation
        if caller === self, try Self.sendBinaryIfRoom(self, (binary, compress)) { return }
        try await sendWaiting(binary: binary, compress: compress)
    }

    private static let sendBinaryIfRoom = ConnectionLoopCall<(Data, Bool), Bool, SwitchboardError> {
        (connection: isolated WebSocketConnection, arguments) throws(SwitchboardError) -> Bool in
        guard connection.isOpen && connection.channel.isWritable else { return false }
        try connection.enqueue(binary: arguments.0, compress: arguments.1)
        return true
    }

    private func sendWaiting(binary: Data, compress: Bool) async throws(SwitchboardError) {
        if !(isOpen && channel.isWritable) { try await waitUntilWritable() }
        try enqueue(binary: binary, compress: compress)
    }

    /// Queues a binary message (its room checked, or waited for, by the caller).
    private func enqueue(binary: Data, compress: Bool) throws(SwitchboardError) {
        try binary.withUnsafeBytes { buf in
            Result { () throws(SwitchboardError) in _ = try enqueue(.binary, buf, exempt: true, compress: compress) }
        }.get()
    }

    /// Sends a message (`compress` as for ``send(text:compress:)``; no executor switch from the
    /// connection's own isolation, as for ``send(text:compress:)``).
    nonisolated(nonsending)
    public func send(_ message: WebSocketMessage, compress: Bool = true) async throws(SwitchboardError) {
        let caller: (any Actor)? = #isolation
        if caller === self, try Self.sendIfRoom(self, (message, compress)) { return }
        try await sendWaiting(message, compress: compress)
    }

    private static let sendIfRoom = ConnectionLoopCall<(WebSocketMessage, Bool), Bool, SwitchboardError> {
        (connection: isolated WebSocketConnection, arguments) throws(SwitchboardError) -> Bool in
        guard connection.isOpen && connection.channel.isWritable else { return false }
        _ = try connection.enqueue(arguments.0, exempt: true, compress: arguments.1)
        return true
    }

    private func sendWaiting(_ message: WebSocketMessage, compress: Bool) async throws(SwitchboardError) {
        if !(isOpen && channel.isWritable) { try await waitUntilWritable() }
        _ = try enqueue(message, exempt: true, compress: compress)
    }

    /// Waits for room (or throws). The senders call it only when there is no room or the
    /// connection is closing: an async call costs a frame, and the common case needs none.
    /// `honoringPolicy` false waits even under ``WebSocketConfiguration/SendPolicy/fail`` (a
    /// replay the server itself started).
    private func waitUntilWritable(honoringPolicy: Bool = true) async throws(SwitchboardError) {
        try checkOpen()
        guard !channel.isWritable else { return }
        if honoringPolicy && configuration.sendPolicy == .fail {
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

    private func enqueue(_ message: WebSocketMessage, exempt: Bool, compress: Bool = true) throws(SwitchboardError) -> OutboundStatus {
        let (opcode, bytes): (WebSocketOpcode, [UInt8]) = switch message {
        case .text(let b): (.text, b)
        case .binary(let b): (.binary, b)
        }
        let reference = role == .server && bytes.count >= Self.byReferenceThreshold
            && !proto.compresses(payloadCount: bytes.count, compress: compress) ? bytes : nil
        return try bytes.withUnsafeBytes { buf in
            Result { () throws(SwitchboardError) in
                try enqueue(opcode, buf, reference: reference, exempt: exempt, compress: compress)
            }
        }.get()
    }

    /// Frames one message into the outbound queue. `exempt`: the sender already waited for room
    /// (so the queue holds at most the high-water mark plus this message); otherwise the queue's
    /// hard ``WebSocketConfiguration/outboundLimit`` applies. `reference`: the payload's own
    /// array, queued after a header instead of copied (server role).
    private func enqueue(_ opcode: WebSocketOpcode, _ payload: UnsafeRawBufferPointer, reference: [UInt8]? = nil,
                         exempt: Bool, compress: Bool = true) throws(SwitchboardError) -> OutboundStatus {
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
                    try proto.writeMessage(opcode, payload: payload, into: &buffer, using: &rng, compress: compress)
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
    ///
    /// `compress` as for ``send(text:compress:)``.
    @discardableResult
    public func sendNow(_ message: WebSocketMessage, compress: Bool = true) throws(SwitchboardError) -> WebSocketSendStatus {
        try checkOpen()
        return try enqueue(message, exempt: false, compress: compress) == .queued ? .queued : .backpressure
    }

    /// Queues a topic publication without waiting: a subscriber whose outbound queue is above
    /// its high-water mark is closed with 1013 instead of growing its buffer or blocking the
    /// publisher. The frame is serialized once for every subscriber (server frames are
    /// unmasked, so identical): the plain frame, or, when this connection compresses the
    /// message with a shared per-loop stream, the compressed frame for its parameters, made
    /// once per publish. A connection with its own compression context compresses the
    /// message itself. Returns whether the message was queued.
    func trySend(_ publication: TopicPublication) -> Bool {
        guard role == .server, isOpen else { return false }
        if let catchUps = topicCatchUps,
           let step = catchUps.step(for: publication, limit: configuration.outboundLimit) {
            switch step {
            case .held(let overLimit):
                guard overLimit else { return true }
                counters?.slowConsumerClosed()
                startClose(code: .tryAgainLater, reason: "slow consumer")
                return false
            case .skip:
                return false
            case .deliver:
                if catchUps.entries.isEmpty { topicCatchUps = nil }
            }
        }
        return sendPublication(publication)
    }

    /// Queues a topic's frame (``trySend(_:)`` once catch-up had its say).
    private func sendPublication(_ publication: TopicPublication) -> Bool {
        if !channel.isWritable {
            counters?.slowConsumerClosed()
            startClose(code: .tryAgainLater, reason: "slow consumer")
            return false
        }
        let count = publication.payload.count
        var frame = publication.frame
        if let codec = proto.deflate, codec.compresses(payloadCount: count, compress: publication.compress) {
            guard let key = codec.sharedCompressorKey else {
                // Its own context: compressed for it alone (counted by enqueue).
                let queued = publication.payload.withUnsafeBytes { payload in
                    (try? enqueue(publication.opcode, payload, exempt: true, compress: true)) != nil
                }
                return queued
            }
            // zlib failing leaves the plain frame: RSV1 is per message.
            frame = publication.compressedFrame(for: key, streams: loop.deflateStreams) ?? frame
        }
        frame.withUnsafeBytes { _ = channel.append($0) }
        counters?.messageOut(bytes: count)
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

// MARK: Topic catch-up

extension WebSocketConnection {
    /// Starts holding `topic`'s publications (``WebSocketServer/subscribeCatchingUp(_:to:)``).
    func beginCatchUp(_ topic: String) -> UInt64 {
        let catchUps = topicCatchUps ?? ConnectionTopicCatchUps()
        topicCatchUps = catchUps
        return catchUps.begin(topic)
    }

    /// ``TopicCatchUp/finish(sending:filter:)``: `first`, then the held publications through
    /// `filter`, in order; `filter` stays for later ones until it says stop.
    func finishCatchUp(topic: String, generation: UInt64, first: WebSocketMessage?,
                       filter: (@Sendable ([UInt8]) -> TopicCatchUpDecision)?) async throws(SwitchboardError) {
        if let first {
            do {
                try await send(first)
                // A long history may fill the queue past its high-water mark: let it drain before
                // the held publications go (a publication finding no room closes the subscriber as
                // a slow consumer). They stay held meanwhile, bounded as before.
                if configuration.sendPolicy != .fail && !channel.isWritable { try await waitUntilWritable() }
            } catch {
                _ = topicCatchUps?.release(topic, generation: generation, filter: nil)
                if topicCatchUps?.entries.isEmpty == true { topicCatchUps = nil }
                throw error
            }
        }
        // From here to the end no suspension: the held publications go out before any later one.
        guard let catchUps = topicCatchUps,
              let held = catchUps.release(topic, generation: generation, filter: filter) else { return }
        for publication in held where catchUps.passes(topic, publication.payload) { _ = sendPublication(publication) }
        if catchUps.entries.isEmpty { topicCatchUps = nil }
    }

    /// A resumed subscription (``WebSocketServer/subscribe(_:to:resumingAfter:announce:)``):
    /// `first`, then the missed publications, each waiting for room like ``send(_:compress:)``,
    /// then the held ones, then live delivery.
    func finishCatchUp(topic: String, generation: UInt64, first: WebSocketMessage?,
                       replaying missed: [TopicPublication]) async throws(SwitchboardError) {
        do throws(SwitchboardError) {
            if let first { try await send(first) }
            for publication in missed {
                try checkOpen()
                if !channel.isWritable { try await waitUntilWritable(honoringPolicy: false) }
                guard sendPublication(publication) else { throw closedError() }
            }
            // The held publications need room too (finding none closes as a slow consumer).
            if !channel.isWritable { try await waitUntilWritable(honoringPolicy: false) }
        } catch {
            await cancelCatchUp(topic: topic, generation: generation)
            throw error
        }
        // No suspension from here: the held publications go out before any later one.
        guard let catchUps = topicCatchUps,
              let held = catchUps.release(topic, generation: generation, filter: nil) else { return }
        for publication in held where catchUps.passes(topic, publication.payload) { _ = sendPublication(publication) }
        if catchUps.entries.isEmpty { topicCatchUps = nil }
    }

    /// Ends a catch-up without sending anything first: what was held goes out as usual.
    func cancelCatchUp(topic: String, generation: UInt64) async {
        guard let catchUps = topicCatchUps,
              let held = catchUps.release(topic, generation: generation, filter: nil) else { return }
        for publication in held where catchUps.passes(topic, publication.payload) { _ = sendPublication(publication) }
        if catchUps.entries.isEmpty { topicCatchUps = nil }
    }
}
