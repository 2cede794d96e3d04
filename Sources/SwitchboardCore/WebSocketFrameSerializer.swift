/// Frame serialization (RFC 6455 §5.2): header and payload written into one buffer, with the
/// shortest length encoding (7 bits up to 125, then 126 + 16 bits, then 127 + 64 bits) and
/// masking (§5.3) with a caller-supplied key.
///
/// The serializer does not enforce connection rules (control frame size, masking by role,
/// state); ``WebSocketProtocol`` does that before calling it.
public enum WebSocketFrameSerializer {
    /// The largest close reason that fits in a control frame: 125 bytes minus the 2-byte code
    /// (§5.5, §5.5.1).
    public static let maxCloseReasonLength = 123

    /// The size of the header for a payload of `payloadLength` bytes (2...14).
    @inlinable
    public static func headerSize(payloadLength: Int, masked: Bool) -> Int {
        let lengthSize: Int
        if payloadLength <= 125 {
            lengthSize = 0
        } else if payloadLength <= 0xFFFF {
            lengthSize = 2
        } else {
            lengthSize = 8
        }
        return 2 + lengthSize + (masked ? 4 : 0)
    }

    /// Appends a frame header to `buffer`.
    @inlinable
    public static func writeHeader(_ header: WebSocketFrameHeader, into buffer: inout [UInt8]) {
        buffer.append((header.fin ? 0x80 : 0) | (header.rsv & 0x7) << 4 | header.opcode.rawValue & 0x0F)
        let maskBit: UInt8 = header.maskingKey == nil ? 0 : 0x80
        let length = header.payloadLength
        if length <= 125 {
            buffer.append(maskBit | UInt8(truncatingIfNeeded: length))
        } else if length <= 0xFFFF {
            buffer.append(maskBit | 126)
            buffer.append(UInt8(truncatingIfNeeded: length >> 8))
            buffer.append(UInt8(truncatingIfNeeded: length))
        } else {
            buffer.append(maskBit | 127)
            for shift in stride(from: 56, through: 0, by: -8) {
                buffer.append(UInt8(truncatingIfNeeded: length >> UInt64(shift)))
            }
        }
        if let key = header.maskingKey {
            buffer.append(key.b0)
            buffer.append(key.b1)
            buffer.append(key.b2)
            buffer.append(key.b3)
        }
    }

    /// Appends a whole frame (header, then the payload masked with `maskingKey` if given) to
    /// `buffer`. `payload` itself is not modified.
    /// `rsv` sets the RSV bits (low three bits; RSV1 is `0b100`, permessage-deflate's
    /// "compressed" bit).
    public static func writeFrame(opcode: WebSocketOpcode, fin: Bool = true, rsv: UInt8 = 0, payload: UnsafeRawBufferPointer, maskingKey: WebSocketMaskingKey?, into buffer: inout [UInt8]) {
        let start = buffer.count
        let needed = start + headerSize(payloadLength: payload.count, masked: maskingKey != nil) + payload.count
        if buffer.capacity < needed {
            // Geometric, like appending: `reserveCapacity` allocates exactly what it is asked
            // for, so frames written one after another into one buffer (a burst queued between
            // two flushes) would each reallocate and copy everything before them.
            buffer.reserveCapacity(start == 0 ? needed : max(needed, 2 * buffer.capacity))
        }
        let header = WebSocketFrameHeader(fin: fin, rsv: rsv, opcode: opcode, maskingKey: maskingKey, payloadLength: UInt64(payload.count))
        writeHeader(header, into: &buffer)
        let payloadStart = buffer.count
        buffer.appendBytes(payload)
        if let maskingKey {
            buffer.withUnsafeMutableBytes { all in
                WebSocketMasking.apply(maskingKey, to: UnsafeMutableRawBufferPointer(rebasing: all[payloadStart...]), phase: 0)
            }
        }
    }

    /// Appends a whole frame to `buffer`; see the raw-buffer overload.
    public static func writeFrame(opcode: WebSocketOpcode, fin: Bool = true, rsv: UInt8 = 0, payload: [UInt8], maskingKey: WebSocketMaskingKey?, into buffer: inout [UInt8]) {
        payload.withUnsafeBytes { writeFrame(opcode: opcode, fin: fin, rsv: rsv, payload: $0, maskingKey: maskingKey, into: &buffer) }
    }

    /// Returns one serialized frame.
    public static func frame(opcode: WebSocketOpcode, fin: Bool = true, rsv: UInt8 = 0, payload: [UInt8], maskingKey: WebSocketMaskingKey?) -> [UInt8] {
        var buffer: [UInt8] = []
        writeFrame(opcode: opcode, fin: fin, rsv: rsv, payload: payload, maskingKey: maskingKey, into: &buffer)
        return buffer
    }

    /// The payload of a close frame (§5.5.1): empty when `code` is nil (the reason is then
    /// dropped, as a reason needs a code), otherwise the code in network byte order followed by
    /// `reason` in UTF-8, truncated on a Unicode scalar boundary to 123 bytes so the payload
    /// stays within the 125-byte control frame limit. Does not check that `code` is sendable.
    public static func closePayload(code: WebSocketCloseCode?, reason: String) -> [UInt8] {
        withClosePayload(code: code, reason: reason) { Array($0) }
    }

    /// ``closePayload(code:reason:)``'s bytes, built on the stack and lent to `body`: a close
    /// frame is written without allocating its payload.
    static func withClosePayload<R>(code: WebSocketCloseCode?, reason: String, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        guard let code else { return body(UnsafeRawBufferPointer(start: nil, count: 0)) }
        return withUnsafeTemporaryAllocation(byteCount: 2 + maxCloseReasonLength, alignment: 1) { buffer in
            buffer[0] = UInt8(truncatingIfNeeded: code.rawValue >> 8)
            buffer[1] = UInt8(truncatingIfNeeded: code.rawValue)
            let length = HTTPSyntax.withUTF8Bytes(reason) { utf8 -> Int in
                let end = truncatedLength(utf8, maxBytes: maxCloseReasonLength)
                if end > 0, let source = utf8.baseAddress, let target = buffer.baseAddress {
                    (target + 2).copyMemory(from: source, byteCount: end)
                }
                return end
            }
            return body(UnsafeRawBufferPointer(rebasing: buffer[0..<(2 + length)]))
        }
    }

    /// The length of the longest prefix of the UTF-8 `utf8` of at most `maxBytes` bytes that
    /// ends on a scalar boundary.
    static func truncatedLength(_ utf8: UnsafeBufferPointer<UInt8>, maxBytes: Int) -> Int {
        guard utf8.count > maxBytes else { return utf8.count }
        var end = max(0, maxBytes)
        // A String's UTF-8 is valid, so backing up over continuation bytes (10xxxxxx) lands
        // on the first byte of the scalar that did not fit.
        while end > 0 && utf8[end] & 0xC0 == 0x80 { end -= 1 }
        return end
    }
}
