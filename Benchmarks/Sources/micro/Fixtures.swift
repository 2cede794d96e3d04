import SwitchboardCore

/// Inputs shared by the benchmarks, built once. Buffers live for the whole process.
enum Fixtures {
    static let kibi = 1 << 10
    static let mebi = 1 << 20

    /// A heap copy of `bytes` that never moves (raw buffers, as the event loop's read buffer).
    static func rawCopy(_ bytes: [UInt8]) -> UnsafeMutableRawBufferPointer {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 16)
        bytes.withUnsafeBytes { buffer.copyMemory(from: $0) }
        return buffer
    }

    static func randomBytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var rng = SplitMix64(seed: seed)
        var bytes = [UInt8](repeating: 0, count: count)
        var index = 0
        while index < count {
            let word = rng.next()
            for shift in stride(from: 0, to: 64, by: 8) where index < count {
                bytes[index] = UInt8(truncatingIfNeeded: word &>> UInt64(shift))
                index += 1
            }
        }
        return bytes
    }

    /// Exactly `count` bytes of ASCII text.
    static func asciiText(_ count: Int) -> [UInt8] {
        let unit = Array("The quick brown fox jumps over the lazy dog; 0123456789 {\"k\":\"v\"}\n".utf8)
        return (0..<count).map { unit[$0 % unit.count] }
    }

    /// Exactly `count` bytes of valid UTF-8 mixing 1-, 2-, 3- and 4-byte sequences: whole
    /// repetitions of a phrase, padded with spaces so no sequence is cut.
    static func mixedText(_ count: Int) -> [UInt8] {
        let unit = Array("héllo wörld ✓ 日本語 😀 ".utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count)
        while bytes.count + unit.count <= count { bytes.append(contentsOf: unit) }
        while bytes.count < count { bytes.append(UInt8(ascii: " ")) }
        return bytes
    }

    /// `count` bytes of `lineLength`-byte lines (terminator included) ending in `terminator`.
    static func lines(totalBytes count: Int, lineLength: Int, terminator: [UInt8]) -> (bytes: [UInt8], lines: Int) {
        precondition(count % lineLength == 0 && lineLength > terminator.count)
        let content = lineLength - terminator.count
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789".utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count)
        let lines = count / lineLength
        for line in 0..<lines {
            for i in 0..<content { bytes.append(alphabet[(line &+ i) % alphabet.count]) }
            bytes.append(contentsOf: terminator)
        }
        return (bytes, lines)
    }

    /// Masked client frames of `payload` packed into at most `limit` bytes, each with its own
    /// key (as a browser sends them).
    static func maskedFrames(opcode: WebSocketOpcode, payload: [UInt8], limit: Int, seed: UInt64) -> (bytes: [UInt8], frames: Int) {
        var rng = SplitMix64(seed: seed)
        let frameSize = WebSocketFrameSerializer.headerSize(payloadLength: payload.count, masked: true) + payload.count
        var bytes: [UInt8] = []
        bytes.reserveCapacity(limit)
        var frames = 0
        while bytes.count + frameSize <= limit {
            WebSocketFrameSerializer.writeFrame(opcode: opcode, payload: payload, maskingKey: WebSocketMaskingKey(using: &rng), into: &bytes)
            frames += 1
        }
        return (bytes, frames)
    }
}
