import CZlib

/// A raw deflate (RFC 1951) compressor for permessage-deflate messages, over zlib.
///
/// The `z_stream` is allocated on the heap and never moves: zlib keeps pointers into it, so a
/// stream stored inline in a Swift value (which may be moved) breaks. Not thread-safe: use an
/// instance from one thread at a time.
public final class DeflateCompressor {
    private let stream: UnsafeMutablePointer<z_stream>
    /// The LZ77 window, as a power of two (9–15).
    public let windowBits: Int

    /// Creates a compressor; nil if zlib refuses the parameters or has no memory.
    ///
    /// - Parameters:
    ///   - level: 0 (store) to 9 (smallest).
    ///   - windowBits: 9 to 15.
    ///   - memoryLevel: 1 to 9 (zlib's `memLevel`: state memory, speed and ratio).
    public init?(level: Int, windowBits: Int, memoryLevel: Int) {
        guard (0...9).contains(level), (9...15).contains(windowBits), (1...9).contains(memoryLevel) else { return nil }
        self.windowBits = windowBits
        guard let stream = ZStream.make({ switchboard_deflate_init($0, Int32(level), -Int32(windowBits), Int32(memoryLevel)) })
        else { return nil }
        self.stream = stream
    }

    deinit {
        ZStream.release(stream, end: deflateEnd)
    }

    /// Compresses one message (§7.2.1): the deflate blocks for `input` ended by a sync flush,
    /// without the final `00 00 ff ff` (a single `00` when nothing else remains, for an empty
    /// input). With `reset`, the next message starts from an empty window (no context
    /// takeover); otherwise it may refer back to this one.
    ///
    /// - Returns: nil if zlib failed; the stream is then reset, so the caller can send the
    ///   message uncompressed and carry on.
    public func compress(_ input: UnsafeRawBufferPointer, reset: Bool) -> [UInt8]? {
        var output: [UInt8] = []
        // deflateBound covers a finished stream; a sync flush adds at most a few bytes more.
        let bound = Int(deflateBound(stream, UInt(min(input.count, Int(UInt32.max))))) + 16
        output.reserveCapacity(min(bound, 1 << 20))
        var ok = true
        withUnsafeTemporaryAllocation(byteCount: Self.chunkSize, alignment: 16) { scratch in
            guard let out = scratch.baseAddress?.assumingMemoryBound(to: Bytef.self) else { ok = false; return }
            var offset = 0
            repeat {
                let piece = min(input.count - offset, Self.maxInputPiece)
                let last = offset + piece == input.count
                stream.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress.map {
                    ($0 + offset).assumingMemoryBound(to: Bytef.self)
                })
                stream.pointee.avail_in = UInt32(piece)
                // Drain until zlib has taken all input and, on the last piece, flushed it all
                // (a sync flush is complete when output space is left over).
                while true {
                    stream.pointee.next_out = out
                    stream.pointee.avail_out = UInt32(Self.chunkSize)
                    let rc = deflate(stream, last ? Z_SYNC_FLUSH : Z_NO_FLUSH)
                    guard rc == Z_OK || rc == Z_BUF_ERROR else { ok = false; return }
                    let produced = Self.chunkSize - Int(stream.pointee.avail_out)
                    output.append(contentsOf: UnsafeBufferPointer(start: out, count: produced))
                    if stream.pointee.avail_in == 0 && stream.pointee.avail_out != 0 { break }
                }
                offset += piece
            } while offset < input.count
        }
        stream.pointee.next_in = nil
        stream.pointee.next_out = nil
        if !ok || !output.ends(with: PerMessageDeflate.tail) {
            deflateReset(stream)
            return nil
        }
        output.removeLast(4)
        if output.isEmpty { output = [0x00] }
        if reset { deflateReset(stream) }
        return output
    }

    /// Output is produced through a scratch buffer of this size.
    static let chunkSize = 16 << 10
    /// zlib counts input in 32 bits: larger inputs are fed in pieces.
    static let maxInputPiece = 1 << 30
}

/// Where zlib streams live: on the heap, never moving (zlib keeps pointers into them).
enum ZStream {
    /// A stream initialized by `initialize` (a zlib init returning `Z_OK`), or nil.
    static func make(_ initialize: (UnsafeMutablePointer<z_stream>) -> Int32) -> UnsafeMutablePointer<z_stream>? {
        let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        stream.initialize(to: z_stream())
        guard initialize(stream) == Z_OK else {
            stream.deinitialize(count: 1)
            stream.deallocate()
            return nil
        }
        return stream
    }

    /// Ends the stream with `end` (`deflateEnd` or `inflateEnd`) and frees it.
    static func release(_ stream: UnsafeMutablePointer<z_stream>, end: (UnsafeMutablePointer<z_stream>) -> Int32) {
        _ = end(stream)
        stream.deinitialize(count: 1)
        stream.deallocate()
    }
}

extension Array where Element == UInt8 {
    func ends(with suffix: [UInt8]) -> Bool {
        count >= suffix.count && self[(count - suffix.count)...].elementsEqual(suffix)
    }
}
