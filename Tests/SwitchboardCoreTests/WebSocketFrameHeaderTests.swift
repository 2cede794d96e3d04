import Testing
@testable import SwitchboardCore

@Suite("RFC 6455 §5.2 frame header decoding")
struct WebSocketFrameHeaderTests {
    static func parse(_ bytes: [UInt8]) throws(WebSocketProtocolError) -> (header: WebSocketFrameHeader, size: Int)? {
        let result = bytes.withUnsafeBytes { raw in
            Result { () throws(WebSocketProtocolError) in try WebSocketFrameHeader.parse(raw) }
        }
        return try result.get()
    }

    @Test func decodesAllFieldsOfAMaskedHeader() throws {
        let parsed = try #require(try Self.parse(hex("81 85 37 fa 21 3d 7f")))
        #expect(parsed.size == 6)
        #expect(parsed.header == WebSocketFrameHeader(fin: true, rsv: 0, opcode: .text, maskingKey: rfcKey, payloadLength: 5))
    }

    @Test func decodesFinRsvAndOpcodeBits() throws {
        let parsed = try #require(try Self.parse(hex("7B 00")))
        #expect(parsed.header == WebSocketFrameHeader(fin: false, rsv: 7, opcode: WebSocketOpcode(rawValue: 0xB)!, maskingKey: nil, payloadLength: 0))
        #expect(try Self.parse(hex("50 00"))?.header.rsv == 5)
    }

    @Test func decodes16And64BitLengths() throws {
        #expect(try Self.parse(hex("82 7E 01 00"))?.header.payloadLength == 256)
        #expect(try Self.parse(hex("82 7E 01 00"))?.size == 4)
        #expect(try Self.parse(hex("82 7F 00 00 00 00 00 01 00 00"))?.header.payloadLength == 65536)
        #expect(try Self.parse(hex("82 FF 7F FF FF FF FF FF FF FF 01 02 03 04"))?.header.payloadLength == UInt64(Int64.max))
        #expect(try Self.parse(hex("82 FF 7F FF FF FF FF FF FF FF 01 02 03 04"))?.size == 14)
    }

    @Test func acceptsNonMinimalLengthEncodings() throws {
        #expect(try Self.parse(hex("82 7E 00 05"))?.header.payloadLength == 5)
        #expect(try Self.parse(hex("82 7F 00 00 00 00 00 00 00 05"))?.header.payloadLength == 5)
        #expect(try Self.parse(hex("82 7F 00 00 00 00 00 00 FF FF"))?.header.payloadLength == 0xFFFF)
    }

    @Test func rejects64BitLengthWithMostSignificantBitSet() {
        #expect(throws: WebSocketProtocolError.lengthMSBSet) { try Self.parse(hex("82 7F 80 00 00 00 00 00 00 00")) }
    }

    @Test func returnsNilUntilTheWholeHeaderIsPresent() throws {
        let full = hex("82 FF 00 00 00 00 00 01 00 00 37 fa 21 3d")
        for count in 0..<full.count {
            #expect(try Self.parse(Array(full[..<count])) == nil, "prefix \(count)")
        }
        #expect(try Self.parse(full)?.size == 14)
    }

    @Test func sizeFromSecondByte() {
        #expect(WebSocketFrameHeader.size(secondByte: 0x05) == 2)
        #expect(WebSocketFrameHeader.size(secondByte: 0x85) == 6)
        #expect(WebSocketFrameHeader.size(secondByte: 0x7E) == 4)
        #expect(WebSocketFrameHeader.size(secondByte: 0xFE) == 8)
        #expect(WebSocketFrameHeader.size(secondByte: 0x7F) == 10)
        #expect(WebSocketFrameHeader.size(secondByte: 0xFF) == WebSocketFrameHeader.maxSize)
    }
}
