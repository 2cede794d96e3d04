/// Bounds applied while parsing an HTTP head, so a peer cannot make us buffer without limit.
public struct HTTPParseLimits: Sendable, Equatable {
    /// Maximum bytes of the whole head: start line, header lines, their terminators and the
    /// final empty line. Default 16 KiB — well above a real browser's upgrade request (about
    /// 1 KiB, more with large cookies), yet small enough that 10,000 half-open handshakes cost
    /// at most 160 MiB of buffers in the worst case. Exceeding it is answered with 431.
    public var maxHeaderBytes: Int
    /// Maximum number of header fields. Default 100 — browsers send 10–20; each field costs a
    /// lookup on every case-insensitive search, so a flood of tiny fields is capped separately
    /// from the byte limit. Exceeding it is answered with 431.
    public var maxHeaderCount: Int

    /// Creates limits; negative values are treated as 0 (every non-empty head is rejected).
    public init(maxHeaderBytes: Int = 16 * 1024, maxHeaderCount: Int = 100) {
        self.maxHeaderBytes = max(0, maxHeaderBytes)
        self.maxHeaderCount = max(0, maxHeaderCount)
    }

    /// 16 KiB, 100 fields.
    public static let `default` = HTTPParseLimits()
}
