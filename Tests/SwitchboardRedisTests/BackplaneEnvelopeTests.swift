import SwitchboardCore
@testable import SwitchboardRedis
import Testing

/// The backplane's envelope, byte by byte (docs/redis-envelope.md).
@Suite struct BackplaneEnvelopeTests {
    static let node: [UInt8] = Array(0x10...0x1f)

    @Test func textEnvelopeIsVersionFlagsNodeThenPayload() {
        let bytes = BackplaneEnvelope(message: .text(Array("hé".utf8)), compress: false, node: Self.node).encoded()
        #expect(bytes == [0x01, 0x00] + Array(0x10...0x1f) + [0x68, 0xc3, 0xa9])
    }

    @Test func binaryAndCompressSetTheirFlagBits() {
        let both = BackplaneEnvelope(message: .binary([0xff, 0x00]), compress: true, node: Self.node).encoded()
        #expect(both == [0x01, 0x03] + Self.node + [0xff, 0x00])
        let binary = BackplaneEnvelope(message: .binary([]), compress: false, node: Self.node).encoded()
        #expect(binary == [0x01, 0x01] + Self.node)
        let text = BackplaneEnvelope(message: .text([0x61]), compress: true, node: Self.node).encoded()
        #expect(text == [0x01, 0x02] + Self.node + [0x61])
    }

    @Test func defaultNodeIsAllZeroAndMeansFromNoProcess() {
        let envelope = BackplaneEnvelope(message: .text(Array("x".utf8)))
        #expect(envelope.encoded() == [0x01, 0x02] + [UInt8](repeating: 0, count: 16) + [0x78])
        #expect(envelope.isFromNoNode)
        #expect(!BackplaneEnvelope(message: .text([]), node: Self.node).isFromNoNode)
    }

    @Test func headerIsTheEnvelopeWithoutItsPayload() {
        let header = BackplaneEnvelope.header(binary: false, compress: true, node: Self.node)
        #expect(header.count == BackplaneEnvelope.headerLength)
        #expect(header == Array(BackplaneEnvelope(message: .text(Array("abc".utf8)), node: Self.node).encoded().prefix(18)))
        // A node id of the wrong length is cut or zero-padded, so the header stays 18 bytes.
        #expect(BackplaneEnvelope.header(binary: true, compress: false, node: [7]) == [1, 1, 7] + [UInt8](repeating: 0, count: 15))
        #expect(BackplaneEnvelope.header(binary: true, compress: false, node: Array(0..<20)) == [1, 1] + Array(0..<16))
    }

    @Test func decodingRoundTripsEveryFlagCombination() throws {
        for message in [WebSocketMessage.text(Array("héllo".utf8)), .text([]), .binary([0, 0xff, 0xc3]), .binary([])] {
            for compress in [false, true] {
                let envelope = BackplaneEnvelope(message: message, compress: compress, node: Self.node)
                let decoded = try #require(BackplaneEnvelope(decoding: envelope.encoded()))
                #expect(decoded == envelope)
            }
        }
    }

    @Test func decodesAnEnvelopeWrittenByHand() throws {
        // What the Python example in docs/redis-envelope.md builds: b"\x01\x00" + 16 zero bytes + text.
        let decoded = try #require(BackplaneEnvelope(decoding: [1, 0] + [UInt8](repeating: 0, count: 16) + Array("hi".utf8)))
        #expect(decoded.message == .text(Array("hi".utf8)))
        #expect(!decoded.compress)
        #expect(decoded.isFromNoNode)
    }

    @Test func malformedEnvelopesDecodeToNil() {
        let node = Self.node
        #expect(BackplaneEnvelope(decoding: []) == nil)
        #expect(BackplaneEnvelope(decoding: [1]) == nil)
        // Every length short of the 18-byte header.
        for length in 0..<18 {
            #expect(BackplaneEnvelope(decoding: Array(([1, 0] + node).prefix(length))) == nil)
        }
        #expect(BackplaneEnvelope(decoding: [1, 0] + node) != nil)  // exactly the header: an empty text
        // Another version.
        #expect(BackplaneEnvelope(decoding: [0, 0] + node + [0x61]) == nil)
        #expect(BackplaneEnvelope(decoding: [2, 0] + node + [0x61]) == nil)
        // A reserved flag bit.
        for bit in 2..<8 {
            #expect(BackplaneEnvelope(decoding: [1, UInt8(1) << bit] + node + [0x61]) == nil)
        }
        // A text payload that is not UTF-8 (a lone continuation byte, a cut sequence, a
        // surrogate); the same bytes as binary are fine.
        for bad: [UInt8] in [[0x80], [0xc3], [0xed, 0xa0, 0x80], [0x61, 0xff]] {
            #expect(BackplaneEnvelope(decoding: [1, 0] + node + bad) == nil)
            #expect(BackplaneEnvelope(decoding: [1, 1] + node + bad)?.message == .binary(bad))
        }
    }

    @Test func nodeIDsAreRandomSixteenBytesNeverAllZero() {
        let a = BackplaneNode.random(), b = BackplaneNode.random()
        #expect(a.count == 16 && b.count == 16)
        #expect(a != b)
        #expect(!a.allSatisfy { $0 == 0 })
        #expect(BackplaneNode.hex([0x00, 0x0f, 0xa0, 0xff]) == "000fa0ff")
        #expect(BackplaneNode.hex(a).count == 32)
    }
}
