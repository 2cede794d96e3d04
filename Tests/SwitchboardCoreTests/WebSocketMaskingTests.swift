import Testing
@testable import SwitchboardCore

@Suite("RFC 6455 §5.3 client-to-server masking")
struct WebSocketMaskingTests {
    /// The definition in §5.3: octet i XOR key octet (i mod 4).
    static func reference(_ key: WebSocketMaskingKey, _ bytes: [UInt8], phase: Int) -> [UInt8] {
        let keyBytes = [key.b0, key.b1, key.b2, key.b3]
        return bytes.enumerated().map { i, byte in byte ^ keyBytes[(phase + i) % 4] }
    }

    @Test func matchesByteByByteReferenceAtEveryPhaseAndLength() {
        var rng = SplitMix64(seed: 42)
        let key = WebSocketMaskingKey(using: &rng)
        for length in 0...40 {
            let data = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
            for phase in 0..<8 {
                var masked = data
                WebSocketMasking.apply(key, to: &masked, phase: phase)
                #expect(masked == Self.reference(key, data, phase: phase), "length \(length) phase \(phase)")
            }
        }
    }

    @Test func worksOnUnalignedSubranges() {
        let data = (0..<100).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        for start in 0..<9 {
            var buffer = data
            buffer.withUnsafeMutableBytes { raw in
                WebSocketMasking.apply(rfcKey, to: UnsafeMutableRawBufferPointer(rebasing: raw[start...]), phase: 0)
            }
            #expect(Array(buffer[..<start]) == Array(data[..<start]))
            #expect(Array(buffer[start...]) == Self.reference(rfcKey, Array(data[start...]), phase: 0), "start \(start)")
        }
    }

    @Test func piecewiseUnmaskingWithPhaseEqualsWholeUnmasking() {
        let data = Array("A payload that arrives in several reads of odd sizes".utf8)
        var whole = data
        WebSocketMasking.apply(rfcKey, to: &whole)
        for cut in 0...data.count {
            var first = Array(data[..<cut])
            var second = Array(data[cut...])
            WebSocketMasking.apply(rfcKey, to: &first, phase: 0)
            WebSocketMasking.apply(rfcKey, to: &second, phase: cut)
            #expect(first + second == whole, "cut \(cut)")
        }
    }

    @Test func maskingTwiceIsIdentityAndNegativePhaseIsModuloFour() {
        let data = Array(0..<37).map(UInt8.init)
        var bytes = data
        WebSocketMasking.apply(rfcKey, to: &bytes, phase: 3)
        var viaNegative = data
        WebSocketMasking.apply(rfcKey, to: &viaNegative, phase: -1)
        #expect(bytes == viaNegative)
        WebSocketMasking.apply(rfcKey, to: &bytes, phase: 3)
        #expect(bytes == data)
    }

    @Test func rfcExampleHelloMasksToSpecifiedBytes() {
        var hello = Array("Hello".utf8)
        WebSocketMasking.apply(rfcKey, to: &hello)
        #expect(hello == hex("7f 9f 4d 51 58"))
        var empty: [UInt8] = []
        WebSocketMasking.apply(rfcKey, to: &empty, phase: 1)
        #expect(empty.isEmpty)
    }
}
