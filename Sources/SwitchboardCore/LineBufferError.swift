/// Why ``LineBuffer`` refused input.
///
/// A struct over a private enum so that new cases are not a breaking change; compare with the
/// static members (`error == .lineTooLong(limit: 1 << 20)`).
public struct LineBufferError: Error, Sendable, Equatable, CustomStringConvertible {
    private enum Kind: Sendable, Equatable {
        case lineTooLong(limit: Int)
    }

    private let kind: Kind

    private init(_ kind: Kind) { self.kind = kind }

    /// A line (without its terminator) is longer than `limit` bytes.
    public static func lineTooLong(limit: Int) -> Self { Self(.lineTooLong(limit: limit)) }

    /// The limit that was exceeded, for ``lineTooLong(limit:)``.
    public var limit: Int {
        switch kind {
        case .lineTooLong(let limit): return limit
        }
    }

    /// A short English explanation including the limit.
    public var description: String {
        switch kind {
        case .lineTooLong(let limit): return "line exceeds the limit of \(limit) bytes"
        }
    }
}
