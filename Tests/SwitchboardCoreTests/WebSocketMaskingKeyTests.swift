import Testing
@testable import SwitchboardCore

@Suite("RFC 6455 §5.3 masking key")
struct WebSocketMaskingKeyTests {
    @Test func randomKeyTakesLowFourBytesLeastSignificantFirst() {
        var rng = TestRNG([0xFFFF_FFFF_3D21_FA37])
        #expect(WebSocketMaskingKey(using: &rng) == rfcKey)
    }

    @Test func successiveRandomKeysComeFromSuccessiveDraws() {
        var rng = SplitMix64(seed: 1)
        let a = WebSocketMaskingKey(using: &rng)
        let b = WebSocketMaskingKey(using: &rng)
        #expect(a != b)
    }

    @Test func bytesRoundTripAndByteAtIndexCyclesModuloFour() {
        var key = WebSocketMaskingKey(1, 2, 3, 4)
        #expect(key.bytes == (1, 2, 3, 4))
        key.bytes = (5, 6, 7, 8)
        #expect(key == WebSocketMaskingKey(5, 6, 7, 8))
        #expect((0..<8).map { key.byte(at: $0) } == [5, 6, 7, 8, 5, 6, 7, 8])
        #expect(key.byte(at: -1) == 8)
        #expect(rfcKey.description == "WebSocketMaskingKey(37 fa 21 3d)")
        #expect(WebSocketMaskingKey(0, 1, 0x10, 0xFF).description == "WebSocketMaskingKey(00 01 10 ff)")
    }
}
