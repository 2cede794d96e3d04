/// SHA-1 (RFC 3174), used only to compute `Sec-WebSocket-Accept` (RFC 6455 §4.2.2).
///
/// SHA-1 is broken for collision resistance; the WebSocket handshake uses it only to prove
/// that the server understood the WebSocket protocol, not for security. Do not use it for
/// anything else.
package struct SHA1: Sendable {
    private typealias State = (UInt32, UInt32, UInt32, UInt32, UInt32)
    private static let initialState: State = (0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0)

    private var state: State = SHA1.initialState
    private var block: [UInt8] = []
    private var length: UInt64 = 0

    /// Creates an empty hasher.
    package init() { block.reserveCapacity(64) }

    /// The 20-byte digest of `bytes`. Contiguous input (an array, a string's UTF-8) is hashed in
    /// place, its whole blocks straight from its storage and the padded tail on the stack.
    package static func hash(_ bytes: some Collection<UInt8>) -> [UInt8] {
        if let digest = bytes.withContiguousStorageIfAvailable({ digest(of: UnsafeRawBufferPointer($0)) }) {
            return digest
        }
        return Array(bytes).withUnsafeBytes { digest(of: $0) }
    }

    /// Adds `bytes` to the message.
    package mutating func update(_ bytes: some Sequence<UInt8>) {
        for byte in bytes {
            block.append(byte)
            length &+= 1
            if block.count == 64 {
                block.withUnsafeBytes { Self.compress(&state, $0) }
                block.removeAll(keepingCapacity: true)
            }
        }
    }

    /// Pads the message and returns the 20-byte digest. The hasher must not be reused after.
    package mutating func finalize() -> [UInt8] {
        var state = self.state
        block.withUnsafeBytes { Self.finish(&state, tail: $0, length: length) }
        return Self.bytes(of: state)
    }

    /// One-shot SHA-1 of `input`.
    private static func digest(of input: UnsafeRawBufferPointer) -> [UInt8] {
        bytes(of: state(of: input))
    }

    /// One-shot SHA-1 of `input`, its 20 bytes written to the start of `digest` (which must
    /// hold at least 20): no array at all, for a digest used at once (the handshake's accept).
    package static func hash(_ input: UnsafeRawBufferPointer, into digest: UnsafeMutableRawBufferPointer) {
        write(state(of: input), to: digest)
    }

    /// The state after the whole of `input`, padded.
    private static func state(of input: UnsafeRawBufferPointer) -> State {
        var state = initialState
        var offset = 0
        while input.count - offset >= 64 {
            compress(&state, UnsafeRawBufferPointer(rebasing: input[offset..<(offset + 64)]))
            offset += 64
        }
        finish(&state, tail: UnsafeRawBufferPointer(rebasing: input[offset...]), length: UInt64(input.count))
        return state
    }

    /// Pads `tail` (fewer than 64 bytes, the message's last ones) with `0x80`, zeros and the
    /// message's bit length (RFC 3174 §4), in one or two blocks on the stack, and compresses them.
    private static func finish(_ state: inout State, tail: UnsafeRawBufferPointer, length: UInt64) {
        let bitLength = length &* 8 // RFC 3174 §4: the length modulo 2^64.
        withUnsafeTemporaryAllocation(byteCount: 128, alignment: 8) { buffer in
            buffer.initializeMemory(as: UInt8.self, repeating: 0)
            buffer.copyMemory(from: tail)
            buffer[tail.count] = 0x80
            let end = tail.count + 9 <= 64 ? 64 : 128
            for i in 0..<8 {
                buffer[end - 1 - i] = UInt8(truncatingIfNeeded: bitLength >> UInt64(8 * i))
            }
            let padded = UnsafeRawBufferPointer(buffer)
            compress(&state, UnsafeRawBufferPointer(rebasing: padded[0..<64]))
            if end == 128 { compress(&state, UnsafeRawBufferPointer(rebasing: padded[64..<128])) }
        }
    }

    /// The state as the 20-byte big-endian digest.
    private static func bytes(of state: State) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: 20) { digest, count in
            write(state, to: UnsafeMutableRawBufferPointer(digest))
            count = 20
        }
    }

    /// Writes the state big-endian to the first 20 bytes of `digest`.
    private static func write(_ state: State, to digest: UnsafeMutableRawBufferPointer) {
        precondition(digest.count >= 20, "a SHA-1 digest is 20 bytes")
        digest.storeBytes(of: state.0.bigEndian, toByteOffset: 0, as: UInt32.self)
        digest.storeBytes(of: state.1.bigEndian, toByteOffset: 4, as: UInt32.self)
        digest.storeBytes(of: state.2.bigEndian, toByteOffset: 8, as: UInt32.self)
        digest.storeBytes(of: state.3.bigEndian, toByteOffset: 12, as: UInt32.self)
        digest.storeBytes(of: state.4.bigEndian, toByteOffset: 16, as: UInt32.self)
    }

    /// Processes one 64-byte block (RFC 3174 §6.1); the message schedule lives on the stack.
    private static func compress(_ state: inout State, _ block: UnsafeRawBufferPointer) {
        withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 80) { w in
            for t in 0..<16 {
                w[t] = UInt32(bigEndian: block.loadUnaligned(fromByteOffset: 4 * t, as: UInt32.self))
            }
            for t in 16..<80 {
                w[t] = rotateLeft(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1)
            }
            var (a, b, c, d, e) = state
            @inline(__always) func round(_ f: UInt32, _ k: UInt32, _ t: Int) {
                let temp = rotateLeft(a, 5) &+ f &+ e &+ w[t] &+ k
                e = d; d = c; c = rotateLeft(b, 30); b = a; a = temp
            }
            for t in 0..<20 { round((b & c) | (~b & d), 0x5A82_7999, t) }
            for t in 20..<40 { round(b ^ c ^ d, 0x6ED9_EBA1, t) }
            for t in 40..<60 { round((b & c) | (b & d) | (c & d), 0x8F1B_BCDC, t) }
            for t in 60..<80 { round(b ^ c ^ d, 0xCA62_C1D6, t) }
            state = (state.0 &+ a, state.1 &+ b, state.2 &+ c, state.3 &+ d, state.4 &+ e)
        }
    }

    @inline(__always)
    private static func rotateLeft(_ value: UInt32, _ count: UInt32) -> UInt32 {
        value << count | value >> (32 - count)
    }
}
