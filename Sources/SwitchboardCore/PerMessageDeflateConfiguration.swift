/// Settings of the permessage-deflate extension (RFC 7692) for one side of a connection.
///
/// Set it on a connection's configuration to offer (client) or accept (server) compression;
/// nil (the default) speaks the uncompressed base protocol.
///
/// ## Modes, and what an idle connection costs
/// - ``Mode-swift.enum/noContextTakeover`` (the default): every message is compressed and
///   decompressed on its own, with one compressor and one decompressor per event loop (per
///   thread) shared by all its connections. A connection keeps no zlib memory at all; a
///   topic publish is compressed once and the same bytes go to every subscriber that
///   negotiated the same parameters. Small JSON lines compress less than with context takeover
///   (each message starts from an empty dictionary).
/// - ``Mode-swift.enum/contextTakeover(windowBits:memoryLevel:)``: each connection gets dedicated zlib streams that
///   keep the last `2^windowBits` bytes as a dictionary across messages, so repetitive traffic
///   (JSON with the same keys) compresses 2–5× better; the streams are allocated on the first
///   compressed message and cost about `2^(windowBits+2) + 2^(memoryLevel+9)` bytes to
///   compress (256 KiB at 15/8, 32 KiB at 12/5) plus `2^windowBits` + 7 KiB to decompress,
///   per connection. The compressor is released again once a connection has sent nothing
///   compressed for a keepalive period (the next message then starts from an empty window);
///   the decompressor stays while the peer may refer to its window. A direction whose sender
///   declared no context takeover still uses the shared per-loop stream.
///
/// ## Security
/// Compressing a secret together with data an attacker influences, in the same message or
/// (with context takeover) the same connection, lets the attacker learn the secret from the
/// compressed sizes (CRIME, BREACH). Send such messages with compression off (the per-message
/// opt-out of `send`), or keep them on connections without compression.
public struct PerMessageDeflateConfiguration: Sendable, Hashable {
    /// Whether compression state is kept across messages.
    public enum Mode: Sendable, Hashable {
        /// No context takeover in either direction; shared per-loop streams, no zlib memory per
        /// connection. A server answers `server_no_context_takeover; client_no_context_takeover`;
        /// a client asks for both.
        case noContextTakeover
        /// Context takeover with dedicated streams of at most `2^windowBits` bytes of window
        /// (9–15) and zlib memory level `memoryLevel` (1–9) per connection. A server limits the
        /// client's window to `windowBits` when the client allows it.
        case contextTakeover(windowBits: Int = 15, memoryLevel: Int = 8)
    }

    /// The mode (default ``Mode-swift.enum/noContextTakeover``).
    public var mode: Mode = .noContextTakeover

    /// zlib compression level, 1 (fastest) to 9 (smallest); default 6, zlib's own default and
    /// the one uWebSockets uses.
    public var compressionLevel: Int = 6

    /// Messages shorter than this many bytes are sent uncompressed (default 256): below it the
    /// deflate block overhead eats most of the gain and the CPU is wasted.
    public var minimumSize: Int = 256

    /// The largest accepted ratio of decompressed to compressed bytes for one message, checked
    /// as the output is produced once a message has inflated past
    /// ``ratioCheckThreshold`` (default 256; nil: no ratio limit). Exceeding it fails the
    /// connection with 1009, like a message over
    /// ``WebSocketProtocolLimits/maxMessageSize`` (which applies to the decompressed bytes
    /// too, whatever the ratio). Deflate tops out near 1032:1, so 256 only refuses messages
    /// of long runs or repeats (which is what a decompression bomb is): even then only beyond
    /// 1 MiB of output.
    public var maxDecompressionRatio: Int? = 256

    /// Decompressed bytes of one message below which ``maxDecompressionRatio`` is not checked
    /// (1 MiB): small messages may legitimately compress very well.
    public static let ratioCheckThreshold = 1 << 20

    /// Every default: no context takeover, level 6, 256-byte threshold, 256:1 ratio limit.
    public init() {}

    /// Creates a configuration in the given mode, other settings at their defaults.
    public init(mode: Mode) {
        self.mode = mode
    }

    /// The defaults: no context takeover with shared per-loop streams.
    public static let `default` = PerMessageDeflateConfiguration()

    /// Context takeover with 15-bit windows and memory level 8 (best ratio, most memory).
    public static let contextTakeover = PerMessageDeflateConfiguration(mode: .contextTakeover())

    /// The window bits used to compress in ``Mode-swift.enum/contextTakeover`` (clamped to
    /// 9...15), or 15 without it.
    var windowBits: Int {
        if case .contextTakeover(let bits, _) = mode { return min(max(bits, 9), 15) }
        return 15
    }

    /// The zlib memory level (clamped to 1...9; 8 without context takeover, where the streams
    /// are shared and memory does not matter).
    var memoryLevel: Int {
        if case .contextTakeover(_, let level) = mode { return min(max(level, 1), 9) }
        return 8
    }

    var takesOverContext: Bool {
        if case .contextTakeover = mode { return true }
        return false
    }

    var clampedLevel: Int { min(max(compressionLevel, 0), 9) }
}
