import Testing
@testable import SwitchboardCore

@Suite("RFC 6455 §5.2 frame serialization and §5.7 examples")
struct WebSocketFrameSerializerTests {
    static let hello = Array("Hello".utf8)

    @Test func rfcExampleUnmaskedText() {
        #expect(WebSocketFrameSerializer.frame(opcode: .text, payload: Self.hello, maskingKey: nil) == hex("81 05 48 65 6c 6c 6f"))
    }

    @Test func rfcExampleMaskedText() {
        #expect(WebSocketFrameSerializer.frame(opcode: .text, payload: Self.hello, maskingKey: rfcKey) == hex("81 85 37 fa 21 3d 7f 9f 4d 51 58"))
    }

    @Test func rfcExampleFragmentedText() {
        #expect(WebSocketFrameSerializer.frame(opcode: .text, fin: false, payload: Array("Hel".utf8), maskingKey: nil) == hex("01 03 48 65 6c"))
        #expect(WebSocketFrameSerializer.frame(opcode: .continuation, payload: Array("lo".utf8), maskingKey: nil) == hex("80 02 6c 6f"))
    }

    @Test func rfcExamplePingAndMaskedPong() {
        #expect(WebSocketFrameSerializer.frame(opcode: .ping, payload: Self.hello, maskingKey: nil) == hex("89 05 48 65 6c 6c 6f"))
        #expect(WebSocketFrameSerializer.frame(opcode: .pong, payload: Self.hello, maskingKey: rfcKey) == hex("8a 85 37 fa 21 3d 7f 9f 4d 51 58"))
    }

    @Test func rfcExample256ByteBinaryUses16BitLength() {
        let payload = (0..<256).map { UInt8(truncatingIfNeeded: $0) }
        let frame = WebSocketFrameSerializer.frame(opcode: .binary, payload: payload, maskingKey: nil)
        #expect(Array(frame[..<4]) == hex("82 7E 01 00"))
        #expect(Array(frame[4...]) == payload)
    }

    @Test func rfcExample64KiBBinaryUses64BitLength() {
        let payload = (0..<65536).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let frame = WebSocketFrameSerializer.frame(opcode: .binary, payload: payload, maskingKey: nil)
        #expect(Array(frame[..<10]) == hex("82 7F 00 00 00 00 00 01 00 00"))
        #expect(Array(frame[10...]) == payload)
    }

    @Test func usesShortestLengthEncodingAtEachBoundary() {
        for (length, header) in [(0, "82 00"), (125, "82 7D"), (126, "82 7E 00 7E"), (65535, "82 7E FF FF"), (65536, "82 7F 00 00 00 00 00 01 00 00")] {
            let frame = WebSocketFrameSerializer.frame(opcode: .binary, payload: [UInt8](repeating: 0xAB, count: length), maskingKey: nil)
            #expect(Array(frame.prefix(hex(header).count)) == hex(header), "length \(length)")
            #expect(frame.count == hex(header).count + length)
            #expect(WebSocketFrameSerializer.headerSize(payloadLength: length, masked: false) == hex(header).count)
            #expect(WebSocketFrameSerializer.headerSize(payloadLength: length, masked: true) == hex(header).count + 4)
        }
    }

    @Test func writeFrameAppendsToExistingBufferAndLeavesPayloadUnmasked() {
        var buffer: [UInt8] = [0xEE]
        let payload = Self.hello
        payload.withUnsafeBytes { raw in
            WebSocketFrameSerializer.writeFrame(opcode: .text, payload: raw, maskingKey: rfcKey, into: &buffer)
        }
        WebSocketFrameSerializer.writeFrame(opcode: .text, payload: payload, maskingKey: nil, into: &buffer)
        #expect(buffer == [0xEE] + hex("81 85 37 fa 21 3d 7f 9f 4d 51 58") + hex("81 05 48 65 6c 6c 6f"))
        #expect(payload == Self.hello)
    }

    /// Frames written one after another into one buffer (a burst queued between two flushes)
    /// grow it geometrically, as appending does: an exact reservation per frame reallocated
    /// and copied the whole buffer at every frame.
    @Test func framesWrittenIntoOneBufferGrowItGeometrically() {
        var buffer: [UInt8] = []
        var reallocations = 0
        let payload = [UInt8](repeating: 0x61, count: 16)
        for _ in 0..<10_000 {
            let before = buffer.capacity
            WebSocketFrameSerializer.writeFrame(opcode: .text, payload: payload, maskingKey: nil, into: &buffer)
            if buffer.capacity != before { reallocations += 1 }
        }
        #expect(buffer.count == 10_000 * 18)
        // 180,000 bytes from nothing: about 14 doublings.
        #expect(reallocations <= 20, "\(reallocations) reallocations")
    }

    @Test func writeHeaderEncodesRsvBits() {
        var buffer: [UInt8] = []
        WebSocketFrameSerializer.writeHeader(WebSocketFrameHeader(fin: false, rsv: 5, opcode: .binary, maskingKey: nil, payloadLength: 1), into: &buffer)
        #expect(buffer == hex("52 01"))
    }

    @Test func closePayloadEncodesCodeBigEndianThenReason() {
        #expect(WebSocketFrameSerializer.closePayload(code: .normalClosure, reason: "bye") == hex("03 E8") + Array("bye".utf8))
        #expect(WebSocketFrameSerializer.closePayload(code: WebSocketCloseCode(rawValue: 4999), reason: "") == hex("13 87"))
        #expect(WebSocketFrameSerializer.closePayload(code: nil, reason: "dropped without a code") == [])
    }

    @Test func closeReasonIsTruncatedOnAScalarBoundaryToFit125Bytes() {
        let ascii = String(repeating: "a", count: 200)
        #expect(WebSocketFrameSerializer.closePayload(code: .goingAway, reason: ascii).count == 125)
        // 122 ASCII bytes then a 2-byte "é": only 1 byte would fit, so it is dropped whole.
        let split = String(repeating: "a", count: 122) + "é"
        let payload = WebSocketFrameSerializer.closePayload(code: .goingAway, reason: split)
        #expect(payload.count == 124)
        #expect(UTF8Validator.isValid(payload[2...]))
        // 4-byte scalars: 30 fit in 120 bytes, the 31st would end at 124 > 123.
        let emoji = String(repeating: "😀", count: 40)
        let emojiPayload = WebSocketFrameSerializer.closePayload(code: .goingAway, reason: emoji)
        #expect(emojiPayload.count == 2 + 120)
        #expect(String(decoding: emojiPayload[2...], as: UTF8.self) == String(repeating: "😀", count: 30))
        let exact = String(repeating: "b", count: 123)
        #expect(WebSocketFrameSerializer.closePayload(code: .goingAway, reason: exact).count == 125)
    }
}
