/// Size limits applied to received frames and messages.
///
/// RFC 6455 §10.4 asks implementations to bound frame and message sizes so a peer cannot
/// exhaust memory; exceeding either limit fails the connection with 1009 (§7.4.1).
public struct WebSocketProtocolLimits: Sendable, Equatable {
    /// The largest accepted frame payload, in bytes. Checked as soon as a frame header is read,
    /// before any of its payload is buffered.
    ///
    /// Default 16 MiB: far above what chat, RPC and streaming protocols send in one frame,
    /// yet small enough that a few hundred hostile connections cannot exhaust a server's
    /// memory. Negative values act as 0.
    public var maxFrameSize: Int
    /// The largest accepted message, in bytes, summed over all its fragments. A message that
    /// would exceed it fails with 1009 as soon as the header of the offending frame is read.
    ///
    /// Default 16 MiB, equal to the frame limit so a message may be one maximal frame; the
    /// whole message is held in memory until delivered, so this bounds per-connection
    /// buffering. Negative values act as 0.
    public var maxMessageSize: Int

    /// Creates limits; both default to 16 MiB.
    public init(maxFrameSize: Int = 16 << 20, maxMessageSize: Int = 16 << 20) {
        self.maxFrameSize = maxFrameSize
        self.maxMessageSize = maxMessageSize
    }

    /// 16 MiB frames and messages.
    public static let `default` = WebSocketProtocolLimits()
}
