/// Masking and unmasking of frame payloads (RFC 6455 §5.3).
///
/// Masking is an involution (XOR), so the same call masks and unmasks. This is the hot path
/// of every client send and every server receive, so the bulk is processed eight bytes at a
/// time with unaligned loads and stores.
public enum WebSocketMasking {
    /// XORs `buffer` in place with `key`.
    ///
    /// - Parameter key: the frame's masking key.
    /// - Parameter buffer: the payload bytes to mask or unmask, in place.
    /// - Parameter phase: the index, within the whole masked payload, of the first byte of
    ///   `buffer`. A payload that arrives in several reads is unmasked piecewise by passing the
    ///   number of payload bytes already processed. Only `phase mod 4` matters; any integer
    ///   (including negative ones) is accepted.
    @inlinable
    public static func apply(_ key: WebSocketMaskingKey, to buffer: UnsafeMutableRawBufferPointer, phase: Int) {
        let count = buffer.count
        guard count > 0 else { return }
        // Key bytes laid out in memory order starting at `phase`, repeated to fill 8 bytes.
        // Built without branches: the key as a 32-bit word in memory order, rotated by the
        // phase, doubled. Endian-neutral because it is loaded from and used as memory.
        var keyWord: UInt32 = 0
        withUnsafeMutableBytes(of: &keyWord) { raw in
            raw[0] = key.b0
            raw[1] = key.b1
            raw[2] = key.b2
            raw[3] = key.b3
        }
        keyWord = rotateToPhase(keyWord, phase & 3)
        let word = UInt64(keyWord) | UInt64(keyWord) &<< 32
        let wordBytes = UInt64(littleEndian: word)
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
        // Index is a multiple of 8, so the tail starts at the same key phase: its bytes are
        // the low-address bytes of `word`.
        var tail = wordBytes
        while index < count {
            buffer[index] ^= UInt8(truncatingIfNeeded: tail)
            tail &>>= 8
            index &+= 1
        }
    }

    /// `keyWord` holds the key bytes in memory order; returns them starting at key byte `shift`.
    @inlinable
    static func rotateToPhase(_ keyWord: UInt32, _ shift: Int) -> UInt32 {
        // In memory order, "starting at byte k" is a rotation towards lower addresses by k
        // bytes: a right rotation of the little-endian value, a left one of the big-endian.
        // `&<<` masks its amount to 0...31, so a shift of 0 gives `le | le`: no branch needed.
        let bits = UInt32(truncatingIfNeeded: shift &* 8)
        let le = UInt32(littleEndian: keyWord)
        return ((le &>> bits) | (le &<< (32 &- bits))).littleEndian
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
