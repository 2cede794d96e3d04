/// The permessage-deflate state of one connection: the negotiated parameters, and where its
/// zlib streams come from.
///
/// A direction whose sender resets its context after every message (no context takeover)
/// uses the thread's ``PerMessageDeflateSharedStreams``; a direction with context takeover gets
/// a dedicated stream, made on its first compressed message and kept until the connection
/// ends. ``WebSocketProtocol`` owns the codec and calls it.
///
/// Not thread-safe, and shared by reference: use it from the thread that owns `shared`.
public final class PerMessageDeflateCodec {
    /// What was negotiated.
    public let parameters: PerMessageDeflateParameters
    /// Our side's settings.
    public let configuration: PerMessageDeflateConfiguration
    /// Our role: which half of the parameters is ours.
    public let role: WebSocketRole
    private let shared: PerMessageDeflateSharedStreams
    private var ownCompressor: DeflateCompressor?
    private var ownDecompressor: DeflateDecompressor?
    /// ``compress(_:)`` used the dedicated compressor since the last ``releaseIdleStreams()``.
    private var compressedSinceIdleCheck = false

    /// The key of the shared compressor this connection compresses with, or nil when it keeps
    /// its own context: frames compressed with the same key are identical for every connection.
    public let sharedCompressorKey: PerMessageDeflateSharedStreams.CompressorKey?
    private let ownWindowBits: Int
    private let peerResets: Bool

    /// A codec for a connection in `role` that negotiated `parameters`.
    public init(parameters: PerMessageDeflateParameters, configuration: PerMessageDeflateConfiguration,
                role: WebSocketRole, shared: PerMessageDeflateSharedStreams) {
        self.parameters = parameters
        self.configuration = configuration
        self.role = role
        self.shared = shared
        // Compress with no larger a window than allowed, nor than configured (9 at least:
        // zlib cannot do 8, and negotiation never lets 8 through for our side).
        ownWindowBits = max(9, min(parameters.maxWindowBits(of: role), configuration.windowBits))
        let ownResets = parameters.compressesWithoutContext(as: role) || !configuration.takesOverContext
        sharedCompressorKey = ownResets
            ? .init(windowBits: ownWindowBits, level: configuration.clampedLevel, memoryLevel: 8)
            : nil
        peerResets = parameters.compressesWithoutContext(as: role == .server ? .client : .server)
    }

    /// Whether both directions use the shared streams (no context takeover either way): such a
    /// codec keeps no per-connection state and may serve several connections of its thread.
    public var usesSharedStreamsOnly: Bool { sharedCompressorKey != nil && peerResets }

    /// Whether a payload of `count` bytes would be sent compressed (`compress`: the sender's
    /// per-message choice).
    public func compresses(payloadCount count: Int, compress: Bool) -> Bool {
        compress && count >= max(configuration.minimumSize, 1)
    }

    /// Compresses one outgoing message; nil if zlib failed (send it uncompressed).
    public func compress(_ payload: UnsafeRawBufferPointer) -> [UInt8]? {
        if let key = sharedCompressorKey { return shared.compress(payload, key: key) }
        if ownCompressor == nil {
            ownCompressor = DeflateCompressor(level: configuration.clampedLevel, windowBits: ownWindowBits,
                                              memoryLevel: configuration.memoryLevel)
        }
        compressedSinceIdleCheck = true
        return ownCompressor?.compress(payload, reset: false)
    }

    /// Releases the dedicated compressor if nothing was compressed since the previous call.
    /// Called periodically (the connection does it at each keepalive tick), it gives an idle
    /// connection's compression memory back (about 256 KiB at 15 bits, memory level 8). The
    /// next message then starts from an empty window, which a sender may always do; the
    /// decompressor is kept, as the peer's messages may refer to its window.
    public func releaseIdleStreams() {
        if !compressedSinceIdleCheck { ownCompressor = nil }
        compressedSinceIdleCheck = false
    }

    /// Decompresses one received message within `limit` bytes (and the configured ratio).
    public func decompress(_ payload: UnsafeRawBufferPointer, limit: Int) throws(DeflateDecompressor.Failure) -> [UInt8] {
        if peerResets {
            guard let d = shared.decompressor else { throw .corrupt }
            d.reset()
            return try d.decompress(payload, limit: limit, maxRatio: configuration.maxDecompressionRatio)
        }
        if ownDecompressor == nil {
            // The peer's window is at most what it may use.
            let peerBits = max(9, parameters.maxWindowBits(of: role == .server ? .client : .server))
            ownDecompressor = DeflateDecompressor(windowBits: peerBits)
        }
        guard let d = ownDecompressor else { throw .corrupt }
        return try d.decompress(payload, limit: limit, maxRatio: configuration.maxDecompressionRatio)
    }

    /// Whether dedicated streams are allocated (for tests and memory accounting).
    public var holdsDedicatedStreams: Bool { ownCompressor != nil || ownDecompressor != nil }
    /// Whether the dedicated compressor is allocated.
    public var holdsDedicatedCompressor: Bool { ownCompressor != nil }
}
