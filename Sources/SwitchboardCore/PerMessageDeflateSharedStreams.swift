/// The zlib streams one thread shares between all its connections that compress or
/// decompress without context takeover: one decompressor, and one compressor per distinct
/// (window, level, memory level). Each message is compressed or decompressed whole and the
/// stream reset after it, so no connection keeps zlib memory of its own.
///
/// Created lazily on first use; not thread-safe: one instance per event loop (thread), used
/// only there.
public final class PerMessageDeflateSharedStreams {
    /// Parameters of a shared compressor: messages compressed with equal keys are
    /// byte-identical, so a fan-out can compress once for every subscriber with the same key.
    public struct CompressorKey: Hashable, Sendable {
        /// Window bits (9–15).
        public var windowBits: Int
        /// zlib level (0–9).
        public var level: Int
        /// zlib memory level (1–9).
        public var memoryLevel: Int

        /// A key.
        public init(windowBits: Int, level: Int, memoryLevel: Int) {
            self.windowBits = windowBits
            self.level = level
            self.memoryLevel = memoryLevel
        }
    }

    private var compressors: [CompressorKey: DeflateCompressor] = [:]
    private var sharedDecompressor: DeflateDecompressor?

    private struct CodecKey: Hashable {
        var parameters: PerMessageDeflateParameters
        var configuration: PerMessageDeflateConfiguration
        var role: WebSocketRole
    }
    /// Codecs that use these shared streams both ways, one per distinct negotiation: they hold
    /// no per-connection state, so every such connection on this thread shares one. Bounded:
    /// the parameters take a few dozen distinct values at most.
    private var sharedCodecs: [CodecKey: PerMessageDeflateCodec] = [:]

    /// The codec for a connection in `role` that negotiated `parameters`: when both directions
    /// go without context takeover, one instance shared by every such connection of this thread
    /// (no memory per connection); otherwise a codec of its own, whose dedicated streams are
    /// made on first use.
    public func codec(parameters: PerMessageDeflateParameters, configuration: PerMessageDeflateConfiguration,
                      role: WebSocketRole) -> PerMessageDeflateCodec {
        let key = CodecKey(parameters: parameters, configuration: configuration, role: role)
        if let codec = sharedCodecs[key] { return codec }
        let codec = PerMessageDeflateCodec(parameters: parameters, configuration: configuration, role: role, shared: self)
        if codec.usesSharedStreamsOnly { sharedCodecs[key] = codec }
        return codec
    }

    /// Empty: streams are made on first use.
    public init() {}

    /// The shared compressor for `key` (nil if zlib cannot make one).
    public func compressor(_ key: CompressorKey) -> DeflateCompressor? {
        if let c = compressors[key] { return c }
        guard let c = DeflateCompressor(level: key.level, windowBits: key.windowBits, memoryLevel: key.memoryLevel)
        else { return nil }
        compressors[key] = c
        return c
    }

    /// The shared decompressor (15-bit window, which reads any smaller window too); callers
    /// reset it after each message.
    public var decompressor: DeflateDecompressor? {
        if let d = sharedDecompressor { return d }
        sharedDecompressor = DeflateDecompressor(windowBits: 15)
        return sharedDecompressor
    }

    /// Compresses one message with the shared compressor for `key`, leaving it reset.
    public func compress(_ payload: UnsafeRawBufferPointer, key: CompressorKey) -> [UInt8]? {
        compressor(key)?.compress(payload, reset: true)
    }
}
