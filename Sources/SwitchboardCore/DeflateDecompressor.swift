import CZlib

/// A raw deflate (RFC 1951) decompressor for permessage-deflate messages, over zlib, that never
/// produces more than it is allowed to: output is made in bounded chunks and the limits are
/// checked after each one, so a small message that would inflate to gigabytes (a
/// decompression bomb) is stopped after at most `limit` plus one chunk.
///
/// The `z_stream` is allocated on the heap (zlib keeps pointers into it). Not thread-safe: use
/// an instance from one thread at a time.
public final class DeflateDecompressor {
    private let stream: UnsafeMutablePointer<z_stream>
    /// The largest LZ77 window it accepts, as a power of two (9–15).
    public let windowBits: Int

    /// Why ``decompress(_:limit:maxRatio:ratioThreshold:)`` gave up.
    public enum Failure: Error, Equatable, Sendable {
        /// The output would exceed the size limit.
        case tooLarge
        /// The output exceeded the allowed ratio to the input.
        case ratioExceeded
        /// The input is not valid deflate data (or zlib failed).
        case corrupt
    }

    /// Creates a decompressor for windows of up to `2^windowBits` bytes (9–15); nil if zlib
    /// has no memory.
    public init?(windowBits: Int = 15) {
        guard (9...15).contains(windowBits) else { return nil }
        self.windowBits = windowBits
        guard let stream = ZStream.make({ switchboard_inflate_init($0, -Int32(windowBits)) }) else { return nil }
        self.stream = stream
    }

    deinit {
        ZStream.release(stream, end: inflateEnd)
    }

    /// Forgets the window: the next message must not refer back (the sender resets too).
    public func reset() {
        inflateReset(stream)
    }

    /// Decompresses one message's payload (§7.2.2: the `00 00 ff ff` the sender removed is
    /// added back here), continuing from the window of earlier messages unless ``reset()`` was
    /// called.
    ///
    /// - Parameters:
    ///   - input: the message's compressed payload (all its fragments, in order).
    ///   - limit: the most output bytes allowed.
    ///   - maxRatio: the most output bytes per input byte, checked once the output exceeds
    ///     `ratioThreshold`; nil for no ratio limit.
    ///   - ratioThreshold: output size below which the ratio is not checked.
    /// - Throws: ``Failure``; the stream is then reset (the connection is being failed anyway).
    public func decompress(_ input: UnsafeRawBufferPointer, limit: Int, maxRatio: Int? = nil,
                           ratioThreshold: Int = PerMessageDeflateConfiguration.ratioCheckThreshold) throws(Failure) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(min(max(limit, 0), max(4096, min(input.count, 1 << 20) * 4)))
        var failure: Failure?
        withUnsafeTemporaryAllocation(byteCount: DeflateCompressor.chunkSize, alignment: 16) { scratch in
            guard let out = scratch.baseAddress?.assumingMemoryBound(to: Bytef.self) else { failure = .corrupt; return }
            var ended = false
            func run(_ piece: UnsafeRawBufferPointer) {
                stream.pointee.next_in = UnsafeMutablePointer(mutating: piece.baseAddress?.assumingMemoryBound(to: Bytef.self))
                stream.pointee.avail_in = UInt32(piece.count)
                while failure == nil {
                    // A final block ended the deflate stream (§7.2.3.4): what follows it (the
                    // rest of the sender's flush) carries no data.
                    if ended { return }
                    stream.pointee.next_out = out
                    stream.pointee.avail_out = UInt32(DeflateCompressor.chunkSize)
                    let rc = inflate(stream, Z_SYNC_FLUSH)
                    let produced = DeflateCompressor.chunkSize - Int(stream.pointee.avail_out)
                    if produced > limit - output.count {
                        failure = .tooLarge
                        return
                    }
                    output.append(contentsOf: UnsafeBufferPointer(start: out, count: produced))
                    if let maxRatio, output.count > ratioThreshold, output.count / max(input.count, 1) > maxRatio {
                        failure = .ratioExceeded
                        return
                    }
                    switch rc {
                    case Z_OK:
                        if stream.pointee.avail_in == 0 && stream.pointee.avail_out != 0 { return }
                    case Z_STREAM_END:
                        ended = true
                    case Z_BUF_ERROR:
                        // No progress possible: all input consumed (more would be needed).
                        if stream.pointee.avail_in == 0 { return }
                        if stream.pointee.avail_out != 0 { failure = .corrupt }
                    default:
                        failure = .corrupt
                    }
                }
            }
            var offset = 0
            while offset < input.count && failure == nil && !ended {
                let piece = min(input.count - offset, DeflateCompressor.maxInputPiece)
                run(UnsafeRawBufferPointer(rebasing: input[offset..<(offset + piece)]))
                offset += piece
            }
            if !ended && failure == nil {
                PerMessageDeflate.tail.withUnsafeBytes { run($0) }
            }
            if ended && failure == nil {
                // The sender ended its deflate stream: the next message starts a new one.
                inflateReset(stream)
            }
        }
        stream.pointee.next_in = nil
        stream.pointee.next_out = nil
        if let failure {
            inflateReset(stream)
            throw failure
        }
        return output
    }
}
