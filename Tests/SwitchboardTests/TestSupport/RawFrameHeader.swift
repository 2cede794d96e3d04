/// A server frame's header as the hand-written test peers read it (RFC 6455 §5.2), written here
/// rather than taken from the library, so that its parser is not what checks itself.
struct RawFrameHeader {
    var fin: Bool
    /// RSV1–3 (RSV1, 0b100, marks a permessage-deflate compressed message).
    var rsv: UInt8
    var opcode: UInt8
    /// Bytes of header before the payload.
    var headerLength: Int
    var payloadLength: Int

    /// The header at the start of `bytes`, or nil while it is incomplete. Throws on a masked
    /// frame: servers never mask.
    static func parse(_ bytes: some RandomAccessCollection<UInt8>) throws(RawSocketFailure) -> RawFrameHeader? {
        let b = Array(bytes.prefix(10))
        guard b.count >= 2 else { return nil }
        guard b[1] & 0x80 == 0 else { throw RawSocketFailure("server frame is masked") }
        var length = Int(b[1] & 0x7F)
        var header = 2
        if length == 126 {
            guard b.count >= 4 else { return nil }
            length = Int(b[2]) << 8 | Int(b[3])
            header = 4
        } else if length == 127 {
            guard b.count >= 10 else { return nil }
            length = b[2..<10].reduce(0) { $0 << 8 | Int($1) }
            header = 10
        }
        return RawFrameHeader(fin: b[0] & 0x80 != 0, rsv: (b[0] >> 4) & 0x7, opcode: b[0] & 0x0F, headerLength: header,
                              payloadLength: length)
    }

    /// Header plus payload.
    var frameLength: Int { headerLength + payloadLength }
}
