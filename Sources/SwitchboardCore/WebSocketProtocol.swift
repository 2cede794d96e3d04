/// The RFC 6455 connection state machine: frame parsing, message reassembly, control frames
/// and the closing handshake, with no I/O, clock or randomness of its own.
///
/// ## Receiving
/// Pull-based: the I/O layer calls ``nextAction(in:offset:using:)`` on its read buffer until it
/// returns `nil`, handling each action in order. Frame payload is unmasked and appended to the
/// message in progress as it arrives, so a frame may arrive in any number of reads (down to one
/// byte at a time) and nothing but a partial header (at most 14 bytes) and the message in
/// progress is kept between calls. A ping is answered by a `.sendPong` action (§5.5.2).
///
/// ## Closing (§7): the machine decides, the caller writes
/// The machine never writes a close frame by itself: it tells the caller what happened and the
/// caller writes the close frame with ``writeClose(code:reason:into:using:)`` when it is ready.
/// That lets an application answer messages it already received before the connection closes.
/// - **open, the peer's close arrives**: `.peerClosed(status)`; state ``WebSocketProtocolState/closeReceived``.
///   Data may still be sent (the peer's close only ends its direction, §7.1.3). The next
///   ``writeClose(code:reason:into:using:)`` writes the reply, which echoes the peer's code
///   (§5.5.1), and returns ``WebSocketCloseProgress/complete(_:)``: close the transport.
/// - **open, the peer violates the protocol** (§7.1.7, "fail the connection"): `.failed(status)`
///   with ``WebSocketCloseStatus/error`` set; state `.closeReceived` too — failing is also a
///   close. Later input is discarded; data the application already owes may still be sent (an
///   echo of an earlier message goes out before our close); the next `writeClose` writes the
///   close frame carrying the error's code (1002, 1007, 1009…) and completes.
/// - **open, we close first**: `writeClose` writes our close frame and returns
///   ``WebSocketCloseProgress/waitingForPeer``; state `.closing`. Data frames the peer sent
///   before seeing our close are still parsed and delivered (§7.1.4 lets them be discarded; the
///   caller may do so); pings are not answered, since nothing may follow our close frame. When
///   the peer's close arrives: `.peerClosed(status)` then `.closeTransport(status)`; a protocol
///   error instead gives `.closeTransport(status)` with the error.
/// - After `.closeTransport`, or in `.closeReceived`, every call consumes all input and
///   returns `nil`.
///
/// ## Sending
/// `write…` methods append whole frames to the caller's buffer, masked with a fresh key from
/// the generator when this is a client (§5.3); servers never mask. Messages are sent as single
/// frames.
///
/// ## permessage-deflate (RFC 7692)
/// Given a ``PerMessageDeflateCodec`` (after a handshake that negotiated the extension), the
/// machine accepts RSV1 on the first frame of a data message, collects the compressed
/// fragments, and inflates the whole message when its last frame arrives, through the codec's
/// bounded decompressor: the decompressed size is held to
/// ``WebSocketProtocolLimits/maxMessageSize`` (and the codec's ratio limit) as it is
/// produced, and exceeding it fails the connection with 1009; data that does not inflate fails
/// it with 1007. Text is validated after inflating. Messages at or above the codec's
/// threshold are sent compressed unless the caller opts out per message.
///
/// The codec is a reference to zlib state: a copy of the machine shares it, so keep one copy
/// of a machine that has a codec, and use it on the codec's thread. Without a codec the machine
/// is a plain value.
public struct WebSocketProtocol {
    /// The closing-handshake state (§7); starts `.open`.
    public private(set) var state: WebSocketProtocolState = .open
    /// Decides the masking rules for both directions (§5.1).
    public let role: WebSocketRole
    /// The receive limits (§10.4).
    public let limits: WebSocketProtocolLimits

    /// Where the parser is within the current frame.
    private enum FrameState: Sendable {
        case header
        case payload
    }

    // Stored properties are ordered so that small ones share words: one machine per
    // connection, so its size is part of every idle connection's memory.

    private var frameState: FrameState = .header
    /// The frame whose payload is being read.
    private var frameOpcode: WebSocketOpcode = .continuation
    private var frameFin = true
    /// ``recycle(_:)`` was called since the last ``releaseRecycledStorageIfIdle()``.
    private var recycledSinceIdleCheck = false
    /// The data message in progress: `.text` or `.binary`, or nil between messages.
    private var messageOpcode: WebSocketOpcode?
    /// The data message in progress arrived with RSV1 (permessage-deflate): its bytes are
    /// compressed until the last frame.
    private var messageCompressed = false
    /// Masking phase (payload bytes of the current frame already read, mod 4).
    private var framePhase = 0
    private var frameKey: WebSocketMaskingKey?
    private var utf8 = UTF8Validator()
    private var frameRemaining = 0
    /// A header split across reads (at most ``WebSocketFrameHeader/maxSize`` bytes).
    private var headerBuffer: [UInt8] = []

    private var messageBuffer: [UInt8] = []
    /// Storage offered with ``recycle(_:)`` for a later message's payload.
    private var recycledStorage: [UInt8] = []
    /// Largest up-front reservation for an announced frame (beyond it the buffer grows as
    /// bytes arrive).
    static let reservationCap = 1 << 20
    /// The payload of the control frame being read (at most 125 bytes).
    private var controlBuffer: [UInt8] = []

    /// Actions produced together and returned one per call, in order.
    private var pending: [WebSocketProtocolAction] = []

    /// The negotiated permessage-deflate state, nil without the extension.
    public let deflate: PerMessageDeflateCodec?

    /// Close-time state, boxed so that an open machine carries one pointer for it; copied on
    /// write (mutated in place only while this machine holds the only reference), so the
    /// machine keeps value semantics.
    private final class Ending: @unchecked Sendable {
        // Safety: mutated only through `modifyEnding`, while uniquely referenced.
        /// Set once `.closeTransport` has been queued (or the transport ended): every later
        /// call returns nil.
        var finalStatus: WebSocketCloseStatus?
        /// In `.closeReceived`: the status to report once closed and the code and reason of the
        /// close frame ``writeClose(code:reason:into:using:)`` will write (the peer's code
        /// echoed, or our error; no code: an empty payload).
        var closeReply: CloseReply?

        init(finalStatus: WebSocketCloseStatus?, closeReply: CloseReply?) {
            self.finalStatus = finalStatus
            self.closeReply = closeReply
        }
    }
    private var ending: Ending?
    private typealias CloseReply = (status: WebSocketCloseStatus, code: WebSocketCloseCode?, reason: String)

    /// Changes the close-time state in place, after copying it if another machine shares it.
    private mutating func modifyEnding(_ change: (Ending) -> Void) {
        if !isKnownUniquelyReferenced(&ending) {
            ending = Ending(finalStatus: ending?.finalStatus, closeReply: ending?.closeReply)
        }
        if let ending { change(ending) }
    }

    private var finalStatus: WebSocketCloseStatus? { ending?.finalStatus }
    private var closeReply: CloseReply? { ending?.closeReply }

    /// Why the connection closed (or is closing, in `.closeReceived`): the peer's code and
    /// reason, the error we failed it with, or 1006 when the transport ended first. nil while
    /// open or `.closing`.
    public var closeStatus: WebSocketCloseStatus? { finalStatus ?? closeReply?.status }

    private var maxFrameSize: UInt64 { UInt64(max(0, limits.maxFrameSize)) }
    private var maxMessageSize: Int { max(0, limits.maxMessageSize) }

    /// Creates the state machine of an open connection (after the opening handshake);
    /// `deflate` when the handshake negotiated permessage-deflate.
    public init(role: WebSocketRole, limits: WebSocketProtocolLimits = .default, deflate: PerMessageDeflateCodec? = nil) {
        self.role = role
        self.limits = limits
        self.deflate = deflate
    }

    // MARK: - Receiving

    /// Offers the storage of a message this protocol produced, once the caller is done with
    /// it, for the payload of a later data message that fills at least half of it. A stream of
    /// large messages then reuses one buffer instead of allocating (and faulting in) fresh memory
    /// for each. Replaces storage offered before; released when the connection ends or by
    /// ``releaseRecycledStorageIfIdle()``.
    ///
    /// Safe while the caller's message still shares the storage: the protocol then allocates
    /// fresh storage, as without the offer, and the caller's bytes are never written.
    public mutating func recycle(_ storage: [UInt8]) {
        // Only while frames are still parsed: after the peer's close nothing more is received.
        guard state == .open || state == .closing else { return }
        recycledStorage = storage
        recycledSinceIdleCheck = true
    }

    /// Drops storage offered with ``recycle(_:)`` if nothing was offered since the previous
    /// call, and a dedicated permessage-deflate compressor if nothing was compressed since
    /// (``PerMessageDeflateCodec/releaseIdleStreams()``). Called periodically (the connection
    /// does it at each keepalive tick), it bounds how long an idle connection keeps a large
    /// buffer or a zlib stream.
    public mutating func releaseRecycledStorageIfIdle() {
        if !recycledSinceIdleCheck { recycledStorage = [] }
        recycledSinceIdleCheck = false
        deflate?.releaseIdleStreams()
    }

    /// Parses from `input[offset...]`, advancing `offset`, and returns the next action, or `nil`
    /// when more bytes are needed.
    ///
    /// When it returns `nil`, every byte up to `input.count` has been consumed; the caller may
    /// reuse its buffer. When it returns an action, call again with the same input and offset
    /// until `nil`. `rng` supplies the masking keys of the pongs the machine serializes as a
    /// client (`.sendPong`). An `offset` outside `0...input.count` is clamped into it.
    public mutating func nextAction<G: RandomNumberGenerator>(in input: UnsafeRawBufferPointer, offset: inout Int, using rng: inout G) -> WebSocketProtocolAction? {
        offset = min(max(offset, 0), input.count)
        if !pending.isEmpty { return pending.removeFirst() }
        guard state == .open || state == .closing else {
            offset = input.count
            return nil
        }
        while true {
            switch frameState {
            case .header:
                let parsed: WebSocketFrameHeader?
                do {
                    parsed = try readHeader(in: input, offset: &offset)
                } catch {
                    return fail(error)
                }
                guard let header = parsed else { return nil }
                if let error = startFrame(header) { return fail(error) }
                if frameRemaining == 0, let action = finishFrame(using: &rng) { return action }
            case .payload:
                let available = input.count - offset
                guard available > 0 else { return nil }
                let count = min(available, frameRemaining)
                let chunk = UnsafeRawBufferPointer(rebasing: input[offset..<(offset + count)])
                offset += count
                if let error = consumePayload(chunk) { return fail(error) }
                frameRemaining -= count
                framePhase = (framePhase + count) & 3
                if frameRemaining == 0, let action = finishFrame(using: &rng) { return action }
            }
        }
    }

    /// Reads a header from the input (directly when it is whole, through `headerBuffer` when
    /// split across reads). Returns nil, having consumed all input, when incomplete.
    private mutating func readHeader(in input: UnsafeRawBufferPointer, offset: inout Int) throws(WebSocketProtocolError) -> WebSocketFrameHeader? {
        if headerBuffer.isEmpty {
            let rest = UnsafeRawBufferPointer(rebasing: input[offset...])
            if let (header, size) = try WebSocketFrameHeader.parse(rest) {
                offset += size
                return header
            }
            // Fewer bytes than a header (so fewer than 14): keep them all.
            headerBuffer.appendBytes(rest)
            offset = input.count
            return nil
        }
        while offset < input.count {
            let needed = headerBuffer.count < 2 ? 2 : WebSocketFrameHeader.size(secondByte: headerBuffer[1])
            if headerBuffer.count >= needed { break }
            headerBuffer.append(input[offset])
            offset += 1
        }
        let result = headerBuffer.withUnsafeBytes { bytes in
            Result { () throws(WebSocketProtocolError) in try WebSocketFrameHeader.parse(bytes) }
        }
        guard let (header, _) = try result.get() else { return nil }
        headerBuffer.removeAll(keepingCapacity: true)
        return header
    }

    /// Validates a header against the connection rules and prepares to read its payload.
    private mutating func startFrame(_ header: WebSocketFrameHeader) -> WebSocketProtocolError? {
        // RFC 7692 §6: RSV1 marks a compressed message, on its first frame only.
        let compressedStart = header.rsv == 0b100 && deflate != nil
            && (header.opcode == .text || header.opcode == .binary)
        if header.rsv != 0 && !compressedStart { return .rsvBitsSet }
        if header.opcode.isReserved { return .reservedOpcode(header.opcode) }
        switch role {
        case .server where header.maskingKey == nil: return .unmaskedClientFrame
        case .client where header.maskingKey != nil: return .maskedServerFrame
        default: break
        }
        if header.opcode.isControl {
            if !header.fin { return .fragmentedControlFrame }
            if header.payloadLength > 125 { return .controlFrameTooLong }
        } else if header.opcode == .continuation {
            if messageOpcode == nil { return .unexpectedContinuation }
        } else if messageOpcode != nil {
            return .expectedContinuation
        }
        if header.payloadLength > maxFrameSize { return .frameTooLarge }
        // Safe: payloadLength ≤ maxFrameSize ≤ Int.max.
        let length = Int(header.payloadLength)
        if !header.opcode.isControl {
            // messageBuffer.count ≤ maxMessageSize, so the subtraction cannot overflow.
            if length > maxMessageSize - messageBuffer.count { return .messageTooLarge }
            if header.opcode != .continuation {
                messageOpcode = header.opcode
                messageCompressed = compressedStart
                utf8.reset()
            }
            // Room for the whole frame up front (no doubling copies while it arrives), but
            // at most `reservationCap` on the strength of a header alone: a peer announcing
            // a huge frame must send the bytes before we spend memory on them.
            // Growth stays geometric, so a message of many small fragments is not reallocated
            // at every fragment.
            let wanted = messageBuffer.count + min(length, Self.reservationCap)
            if messageBuffer.capacity == 0 && wanted > 0
                && recycledStorage.capacity >= wanted && recycledStorage.capacity / 2 <= wanted {
                // Empties the offered array in place when nobody else holds it; when the caller
                // still shares it, this allocates fresh storage and leaves theirs untouched.
                swap(&messageBuffer, &recycledStorage)
                recycledStorage = []
                messageBuffer.removeAll(keepingCapacity: true)
            }
            if messageBuffer.capacity < wanted {
                messageBuffer.reserveCapacity(max(wanted, 2 * messageBuffer.capacity))
            }
        } else {
            controlBuffer.removeAll(keepingCapacity: true)
        }
        frameOpcode = header.opcode
        frameFin = header.fin
        frameKey = header.maskingKey
        frameRemaining = length
        framePhase = 0
        frameState = .payload
        return nil
    }

    /// Unmasks a piece of payload into the message or control buffer; validates text at once.
    private mutating func consumePayload(_ chunk: UnsafeRawBufferPointer) -> WebSocketProtocolError? {
        if frameOpcode.isControl {
            let start = controlBuffer.count
            controlBuffer.appendBytes(chunk)
            if let key = frameKey { WebSocketMasking.apply(key, to: &controlBuffer, from: start, phase: framePhase) }
            return nil
        }
        let start = messageBuffer.count
        messageBuffer.appendBytes(chunk)
        if let key = frameKey { WebSocketMasking.apply(key, to: &messageBuffer, from: start, phase: framePhase) }
        // Compressed text is validated once inflated.
        if messageOpcode == .text && !messageCompressed {
            let valid = messageBuffer.withUnsafeBytes { all in
                utf8.validate(UnsafeRawBufferPointer(rebasing: all[start...]))
            }
            if !valid { return .invalidUTF8 }
        }
        return nil
    }

    /// Called when the current frame's payload is complete; returns the resulting action, if any.
    private mutating func finishFrame<G: RandomNumberGenerator>(using rng: inout G) -> WebSocketProtocolAction? {
        frameState = .header
        switch frameOpcode {
        case .ping:
            let payload = takeControlPayload()
            // §5.5.1: nothing follows our close frame, so pings after it go unanswered.
            guard state == .open else { return nil }
            return .sendPong(frame(.pong, payload: payload, using: &rng))
        case .pong:
            return .pong(takeControlPayload())
        case .close:
            return peerClose()
        default:
            guard frameFin, let opcode = messageOpcode else { return nil }
            var payload = messageBuffer
            messageBuffer = []
            messageOpcode = nil
            if messageCompressed {
                messageCompressed = false
                switch inflate(payload) {
                case .success(let inflated): payload = inflated
                case .failure(let error): return fail(error)
                }
                if opcode == .text && !UTF8Validator.isValid(payload) { return fail(.invalidUTF8) }
            } else if opcode == .text && !utf8.isComplete {
                return fail(.invalidUTF8)
            }
            return .message(opcode == .text ? .text(payload) : .binary(payload))
        }
    }

    /// Inflates a compressed message within the message size limit (RFC 7692 §7.2.2).
    private func inflate(_ compressed: [UInt8]) -> Result<[UInt8], WebSocketProtocolError> {
        guard let deflate else { return .failure(.rsvBitsSet) }
        let limit = maxMessageSize
        let result = compressed.withUnsafeBytes { raw in
            Result { () throws(DeflateDecompressor.Failure) in try deflate.decompress(raw, limit: limit) }
        }
        switch result {
        case .success(let inflated):
            return .success(inflated)
        case .failure(let error):
            switch error {
            case .tooLarge: return .failure(.messageTooLarge)
            case .ratioExceeded: return .failure(.decompressionRatioExceeded)
            case .corrupt: return .failure(.invalidCompressedData)
            }
        }
    }

    private mutating func takeControlPayload() -> [UInt8] {
        let payload = controlBuffer
        controlBuffer = []
        return payload
    }

    /// Handles the peer's close frame (§5.5.1, §7.1.5).
    private mutating func peerClose() -> WebSocketProtocolAction {
        let payload = takeControlPayload()
        let status: WebSocketCloseStatus
        switch payload.count {
        case 0:
            status = WebSocketCloseStatus(code: .noStatusReceived)
        case 1:
            return fail(.invalidClosePayload)
        default:
            let raw = UInt16(payload[0]) << 8 | UInt16(payload[1])
            guard let code = WebSocketCloseCode(validatingWireCode: raw) else {
                return fail(.invalidCloseCode(raw))
            }
            let reasonBytes = payload[2...]
            guard UTF8Validator.isValid(reasonBytes) else { return fail(.invalidCloseReasonUTF8) }
            status = WebSocketCloseStatus(code: code, reason: String(decoding: reasonBytes, as: UTF8.self))
        }
        guard state == .open else {
            // We sent our close first: the handshake is complete.
            terminate(status)
            pending.append(.closeTransport(status))
            return .peerClosed(status)
        }
        // §5.5.1: the reply echoes the peer's status code (none if it sent none).
        let replyCode: WebSocketCloseCode? = status.code == .noStatusReceived ? nil : status.code
        enterCloseReceived(status, replyCode: replyCode, replyReason: "")
        return .peerClosed(status)
    }

    /// Fails the connection (§7.1.7). Open: `.failed`, state `.closeReceived`, the close frame
    /// with the error's code written by the next `writeClose`. Closing (our close already
    /// sent): `.closeTransport` at once.
    private mutating func fail(_ error: WebSocketProtocolError) -> WebSocketProtocolAction {
        let status = WebSocketCloseStatus(code: error.closeCode, reason: error.description, error: error)
        guard state == .open else {
            terminate(status)
            return .closeTransport(status)
        }
        enterCloseReceived(status, replyCode: error.closeCode, replyReason: error.description)
        return .failed(status)
    }

    /// Stops parsing, releases the receive buffers, and keeps the close reply for `writeClose`.
    private mutating func enterCloseReceived(_ status: WebSocketCloseStatus, replyCode: WebSocketCloseCode?, replyReason: String) {
        releaseReceiveBuffers()
        state = .closeReceived
        modifyEnding { $0.closeReply = (status, replyCode, replyReason) }
    }

    /// Enters the terminal state and releases buffers.
    private mutating func terminate(_ status: WebSocketCloseStatus) {
        state = .closed
        modifyEnding {
            $0.finalStatus = status
            $0.closeReply = nil
        }
        releaseReceiveBuffers()
    }

    private mutating func releaseReceiveBuffers() {
        headerBuffer = []
        messageBuffer = []
        recycledStorage = []
        controlBuffer = []
        messageOpcode = nil
        messageCompressed = false
        frameState = .header
        frameRemaining = 0
    }

    /// Serializes one frame written by the machine itself, masked when we are a client.
    private func frame<G: RandomNumberGenerator>(_ opcode: WebSocketOpcode, payload: [UInt8], using rng: inout G) -> [UInt8] {
        var buffer: [UInt8] = []
        writeFrame(opcode, payload: payload, into: &buffer, using: &rng)
        return buffer
    }

    private func writeFrame<G: RandomNumberGenerator>(_ opcode: WebSocketOpcode, payload: [UInt8], into buffer: inout [UInt8], using rng: inout G) {
        let role = self.role  // the closure captures this, not a copy of the whole machine
        payload.withUnsafeBytes { Self.writeFrame(opcode, role: role, payload: $0, into: &buffer, using: &rng) }
    }

    /// Static, and given only the role: called from closures (a close payload built on the
    /// stack), where calling an instance method would capture a copy of the whole machine
    /// (its queues and buffers retained and released for every close frame).
    private static func writeFrame<G: RandomNumberGenerator>(_ opcode: WebSocketOpcode, role: WebSocketRole, payload: UnsafeRawBufferPointer, into buffer: inout [UInt8], using rng: inout G) {
        let key: WebSocketMaskingKey? = role == .client ? WebSocketMaskingKey(using: &rng) : nil
        WebSocketFrameSerializer.writeFrame(opcode: opcode, payload: payload, maskingKey: key, into: &buffer)
    }

    // MARK: - Sending

    /// Appends a data message as one frame to `buffer` (§5.6), masked when we are a client.
    ///
    /// With permessage-deflate, a payload at or above the codec's threshold is compressed
    /// (RSV1 set) unless `compress` is false; if zlib fails, the message goes uncompressed.
    ///
    /// - Throws: `.invalidArgument` if `opcode` is not `.text` or `.binary`, or a text payload
    ///   is not valid UTF-8 (the peer would fail the connection, §8.1); `.notOpen` once our
    ///   close frame is sent or the connection is closed (§5.5.1: no data after our close
    ///   frame). In `.closeReceived` sending is still allowed.
    public mutating func writeMessage<G: RandomNumberGenerator>(_ opcode: WebSocketOpcode, payload: UnsafeRawBufferPointer, into buffer: inout [UInt8], using rng: inout G, compress: Bool = true) throws(WebSocketStateError) {
        try checkMessage(opcode, payload: payload)
        if let deflate, deflate.compresses(payloadCount: payload.count, compress: compress),
           let compressed = deflate.compress(payload) {
            let key: WebSocketMaskingKey? = role == .client ? WebSocketMaskingKey(using: &rng) : nil
            WebSocketFrameSerializer.writeFrame(opcode: opcode, rsv: 0b100, payload: compressed, maskingKey: key, into: &buffer)
            return
        }
        Self.writeFrame(opcode, role: role, payload: payload, into: &buffer, using: &rng)
    }

    /// Whether ``writeMessage(_:payload:into:using:compress:)-(_,UnsafeRawBufferPointer,_,_,_)``
    /// would compress a payload of `count` bytes.
    public func compresses(payloadCount count: Int, compress: Bool = true) -> Bool {
        deflate?.compresses(payloadCount: count, compress: compress) ?? false
    }

    /// Server role: appends only the header of an uncompressed data message to `buffer`, after
    /// the same checks as ``writeMessage(_:payload:into:using:compress:)-(_,UnsafeRawBufferPointer,_,_,_)``;
    /// the caller sends `payload` itself right after it. Server frames are unmasked (§5.1), so
    /// a large payload can go to the socket as it is, without being copied into the buffer.
    ///
    /// - Throws: as ``writeMessage(_:payload:into:using:compress:)-(_,UnsafeRawBufferPointer,_,_,_)``,
    ///   and `.invalidArgument` as a client (its payload must be masked: use
    ///   ``writeMessage(_:payload:into:using:compress:)-(_,UnsafeRawBufferPointer,_,_,_)``).
    public mutating func writeMessageHeader(_ opcode: WebSocketOpcode, payload: UnsafeRawBufferPointer, into buffer: inout [UInt8]) throws(WebSocketStateError) {
        guard role == .server else { throw .invalidArgument }
        try checkMessage(opcode, payload: payload)
        WebSocketFrameSerializer.writeHeader(WebSocketFrameHeader(fin: true, opcode: opcode, maskingKey: nil,
                                                                  payloadLength: UInt64(payload.count)), into: &buffer)
    }

    /// A data message may be sent: a data opcode, valid UTF-8 for text (§8.1), and ``canSend``.
    private func checkMessage(_ opcode: WebSocketOpcode, payload: UnsafeRawBufferPointer) throws(WebSocketStateError) {
        guard opcode == .text || opcode == .binary else { throw .invalidArgument }
        if opcode == .text {
            var validator = UTF8Validator()
            guard validator.validate(payload) && validator.isComplete else { throw .invalidArgument }
        }
        guard canSend else { throw .notOpen }
    }

    /// True while frames other than our close may still be written: `.open` and `.closeReceived`.
    public var canSend: Bool { state == .open || state == .closeReceived }

    /// Appends a data message as one frame; see the raw-buffer overload.
    public mutating func writeMessage<G: RandomNumberGenerator>(_ opcode: WebSocketOpcode, payload: [UInt8], into buffer: inout [UInt8], using rng: inout G, compress: Bool = true) throws(WebSocketStateError) {
        let result = payload.withUnsafeBytes { raw in
            Result { () throws(WebSocketStateError) in
                try writeMessage(opcode, payload: raw, into: &buffer, using: &rng, compress: compress)
            }
        }
        try result.get()
    }

    /// Appends a ping (§5.5.2).
    ///
    /// - Throws: `.invalidArgument` if `payload` exceeds 125 bytes (§5.5); `.notOpen` unless
    ///   ``canSend``.
    public mutating func writePing<G: RandomNumberGenerator>(payload: [UInt8], into buffer: inout [UInt8], using rng: inout G) throws(WebSocketStateError) {
        try writeControl(.ping, payload: payload, into: &buffer, using: &rng)
    }

    /// Appends an unsolicited pong (§5.5.3), e.g. a unidirectional heartbeat. Pongs answering
    /// pings come from ``nextAction(in:offset:using:)`` as `.sendPong`.
    ///
    /// - Throws: `.invalidArgument` if `payload` exceeds 125 bytes (§5.5); `.notOpen` unless
    ///   ``canSend``.
    public mutating func writePong<G: RandomNumberGenerator>(payload: [UInt8], into buffer: inout [UInt8], using rng: inout G) throws(WebSocketStateError) {
        try writeControl(.pong, payload: payload, into: &buffer, using: &rng)
    }

    private mutating func writeControl<G: RandomNumberGenerator>(_ opcode: WebSocketOpcode, payload: [UInt8], into buffer: inout [UInt8], using rng: inout G) throws(WebSocketStateError) {
        guard payload.count <= 125 else { throw .invalidArgument }
        guard canSend else { throw .notOpen }
        writeFrame(opcode, payload: payload, into: &buffer, using: &rng)
    }

    /// Writes our close frame (§7.1.2): starts the closing handshake, or completes it.
    ///
    /// - `.open`: appends a close frame with `code` and `reason` and returns
    ///   ``WebSocketCloseProgress/waitingForPeer`` (state `.closing`).
    /// - `.closeReceived`: appends the reply the machine decided when the peer's close (or its
    ///   protocol error) arrived — the peer's code echoed, or the error's code; `code` and
    ///   `reason` are not used — and returns ``WebSocketCloseProgress/complete(_:)`` with the
    ///   final status (state `.closed`): close the transport.
    /// - `.closing` or `.closed`: writes nothing, returns ``WebSocketCloseProgress/alreadySent``
    ///   (so calling it twice is harmless).
    ///
    /// `reason` is truncated on a Unicode scalar boundary to 123 bytes (§5.5: control payloads
    /// are at most 125 bytes, 2 of them the code).
    ///
    /// - Throws: `.invalidArgument` if `code` must not be sent (1005, 1006, 1015, unassigned;
    ///   §7.4.1), checked before the state.
    @discardableResult
    public mutating func writeClose<G: RandomNumberGenerator>(code: WebSocketCloseCode, reason: String, into buffer: inout [UInt8], using rng: inout G) throws(WebSocketStateError) -> WebSocketCloseProgress {
        guard code.isSendable else { throw .invalidArgument }
        let role = self.role
        switch state {
        case .open:
            WebSocketFrameSerializer.withClosePayload(code: code, reason: reason) {
                Self.writeFrame(.close, role: role, payload: $0, into: &buffer, using: &rng)
            }
            state = .closing
            return .waitingForPeer
        case .closeReceived:
            guard let reply = closeReply else { return .alreadySent }
            WebSocketFrameSerializer.withClosePayload(code: reply.code, reason: reply.reason) {
                Self.writeFrame(.close, role: role, payload: $0, into: &buffer, using: &rng)
            }
            terminate(reply.status)
            return .complete(reply.status)
        case .closing, .closed:
            return .alreadySent
        }
    }

    /// Records that the transport ended. Returns the final status: the one already reported by
    /// `.closeTransport` if the machine got that far, the peer's close (or our error) if it
    /// arrived but our reply was never written, otherwise 1006 (§7.1.5: closed without a close
    /// handshake). State becomes `.closed`; later `nextAction` calls return `nil`.
    public mutating func transportClosed() -> WebSocketCloseStatus {
        pending = []
        if let finalStatus { return finalStatus }
        if let reply = closeReply {
            terminate(reply.status)
            return reply.status
        }
        let status = WebSocketCloseStatus(code: .abnormalClosure)
        terminate(status)
        return status
    }
}

extension Array where Element == UInt8 {
    /// Appends raw bytes with a single bulk copy (appending a raw buffer as a generic sequence
    /// may copy element by element).
    @inlinable
    mutating func appendBytes(_ bytes: UnsafeRawBufferPointer) {
        bytes.withMemoryRebound(to: UInt8.self) { append(contentsOf: $0) }
    }
}
