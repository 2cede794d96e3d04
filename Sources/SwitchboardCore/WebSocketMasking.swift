/// Masking and unmasking of frame payloads (RFC 6455 §5.3).
///
/// Masking is an involution (XOR), so the same call masks and unmasks. This is the hot path
/// of every client send and every server receive, so the bulk is processed eight bytes at a
/// time with unaligned loads and stores.
public enum WebSocketMasking {
    /// XORs `buffer` in place with `key`.
    ///
    /// - Parameter phase: the index, within the whole masked payload, of the first byte of
    ///   `buffer`. A payload that arrives in several reads is unmasked piecewise by passing the
    ///   number of payload bytes already processed. Only `phase mod 4` matters; any integer
    ///   (including negative ones) is accepted.
    @inlinable
    public static func apply(_ key: WebSocketMaskingKey, to buffer: UnsafeMutableRawBufferPointer, phase: Int) {
        let count = buffer.count
        guard count > 0 else { return }
        // Key bytes laid out in memory order starting at `phase`, repeated to fill 8 bytes:
        // endian-neutral because it is built byte by byte in memory.
        var word: UInt64 = 0
        withUnsafeMutableBytes(of: &word) { raw in
            for j in 0..<8 { raw[j] = key.byte(at: phase &+ j) }
        }
        var index = 0
        // 32 bytes per iteration, then 8 at a time.
        while count &- index >= 32 {
            let a = buffer.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            let b = buffer.loadUnaligned(fromByteOffset: index &+ 8, as: UInt64.self)
            let c = buffer.loadUnaligned(fromByteOffset: index &+ 16, as: UInt64.self)
            let d = buffer.loadUnaligned(fromByteOffset: index &+ 24, as: UInt64.self)
            buffer.storeBytes(of: a ^ word, toByteOffset: index, as: UInt64.self)
            buffer.storeBytes(of: b ^ word, toByteOffset: index &+ 8, as: UInt64.self)
            buffer.storeBytes(of: c ^ word, toByteOffset: index &+ 16, as: UInt64.self)
            buffer.storeBytes(of: d ^ word, toByteOffset: index &+ 24, as: UInt64.self)
            index &+= 32
        }
        while count &- index >= 8 {
            let value = buffer.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            buffer.storeBytes(of: value ^ word, toByteOffset: index, as: UInt64.self)
            index &+= 8
        }
        // Index is a multiple of 8, so the key phase of the tail is unchanged.
        while index < count {
            buffer[index] ^= key.byte(at: phase &+ index)
            index &+= 1
        }
    }

    /// XORs `bytes` in place with `key`; see the raw-buffer overload for `phase`.
    @inlinable
    public static func apply(_ key: WebSocketMaskingKey, to bytes: inout [UInt8], phase: Int = 0) {
        bytes.withUnsafeMutableBytes { apply(key, to: $0, phase: phase) }
    }
}

extension WebSocketMasking {
    /// XORs `bytes[start...]` in place, where `bytes[start]` is payload index `phase`.
    @inlinable
    static func apply(_ key: WebSocketMaskingKey, to bytes: inout [UInt8], from start: Int, phase: Int) {
        bytes.withUnsafeMutableBytes { all in
            apply(key, to: UnsafeMutableRawBufferPointer(rebasing: all[start...]), phase: phase)
        }
    }
}
