/// A frame header (RFC 6455 §5.2).
///
/// ```
///  0               1               2               3
///  F R R R opcode  M len(7)        [extended length: 16 or 64 bits] [masking key: 32 bits]
///  I S S S         A
///  N V V V         S
///    1 2 3         K
/// ```
public struct WebSocketFrameHeader: Equatable, Sendable {
    /// Whether this is the final fragment of a message (always true for control frames).
    public var fin: Bool
    /// The three RSV bits as a number 0...7 (RSV1 is 4, RSV3 is 1). Must be 0 unless an
    /// extension defines them; this library negotiates none.
    public var rsv: UInt8
    /// The opcode, possibly reserved: rejecting reserved opcodes is the connection's job.
    public var opcode: WebSocketOpcode
    /// Present when the MASK bit is set.
    public var maskingKey: WebSocketMaskingKey?
    /// The payload length as sent (at most 2^63 - 1 on the wire).
    public var payloadLength: UInt64

    /// Creates a header; `rsv` is reduced to its low three bits.
    public init(fin: Bool = true, rsv: UInt8 = 0, opcode: WebSocketOpcode, maskingKey: WebSocketMaskingKey?, payloadLength: UInt64) {
        self.fin = fin
        self.rsv = rsv & 0x7
        self.opcode = opcode
        self.maskingKey = maskingKey
        self.payloadLength = payloadLength
    }

    /// The largest header: 2 fixed bytes, 8 bytes of 64-bit length and a 4-byte key.
    public static let maxSize = 14

    /// The total header size announced by the second header byte (2...14).
    @inlinable
    public static func size(secondByte: UInt8) -> Int {
        var size = 2
        switch secondByte & 0x7F {
        case 126: size += 2
        case 127: size += 8
        default: break
        }
        if secondByte & 0x80 != 0 { size += 4 }
        return size
    }

    /// Decodes a header from the start of `bytes`.
    ///
    /// Returns `nil` when `bytes` holds only part of a header, otherwise the header and its size
    /// in bytes. Only the header's own syntax is checked here: a 64-bit length with its most
    /// significant bit set (§5.2) throws ``WebSocketProtocolError/lengthMSBSet``. RSV bits,
    /// opcodes, masking and limits are the connection's business (``WebSocketProtocol``).
    ///
    /// Non-minimal length encodings (say 126 followed by a 16-bit 5) are accepted: §5.2 says
    /// the *sender* must use the minimal encoding, but a receiver loses nothing by reading the
    /// value as written, and the Autobahn test suite does not require rejection.
    public static func parse(_ bytes: UnsafeRawBufferPointer) throws(WebSocketProtocolError) -> (header: WebSocketFrameHeader, size: Int)? {
        guard bytes.count >= 2 else { return nil }
        let first = bytes[0]
        let second = bytes[1]
        let size = Self.size(secondByte: second)
        guard bytes.count >= size else { return nil }

        var index = 2
        var length = UInt64(second & 0x7F)
        if length == 126 {
            length = UInt64(bytes[2]) << 8 | UInt64(bytes[3])
            index = 4
        } else if length == 127 {
            length = 0
            for i in 2..<10 { length = length << 8 | UInt64(bytes[i]) }
            index = 10
            guard length & (1 << 63) == 0 else { throw .lengthMSBSet }
        }
        var key: WebSocketMaskingKey?
        if second & 0x80 != 0 {
            key = WebSocketMaskingKey(bytes[index], bytes[index + 1], bytes[index + 2], bytes[index + 3])
        }
        let header = WebSocketFrameHeader(
            fin: first & 0x80 != 0,
            rsv: (first >> 4) & 0x7,
            opcode: WebSocketOpcode(uncheckedRawValue: first & 0x0F),
            maskingKey: key,
            payloadLength: length
        )
        return (header, size)
    }
}
