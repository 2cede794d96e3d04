/// Bounds of the RESP parser: a reply above any of them is refused before its payload is
/// buffered, so a server (or anyone between us and it) cannot grow our memory without bound.
public struct RESPParseLimits: Sendable, Equatable {
    /// Longest bulk string, in bytes. Default 16 MiB.
    public var maxBulkLength: Int
    /// Most elements in one array. Default 1,048,576.
    public var maxAggregateCount: Int
    /// Deepest nesting of arrays. Default 16.
    public var maxDepth: Int
    /// Longest line (simple string, error, integer, length header). Default 64 KiB.
    public var maxLineLength: Int

    /// Limits; every argument has its default.
    public init(maxBulkLength: Int = 16 << 20, maxAggregateCount: Int = 1 << 20, maxDepth: Int = 16,
                maxLineLength: Int = 64 << 10) {
        self.maxBulkLength = maxBulkLength
        self.maxAggregateCount = maxAggregateCount
        self.maxDepth = maxDepth
        self.maxLineLength = maxLineLength
    }

    /// The defaults.
    public static let `default` = RESPParseLimits()
}
