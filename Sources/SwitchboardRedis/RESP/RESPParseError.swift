/// Why bytes from Redis are not a RESP2 value within the limits.
public enum RESPParseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The first byte of a value is not `+ - : $ *`.
    case unknownType(UInt8)
    /// A length that is not -1 or a non-negative decimal number.
    case invalidLength(String)
    /// An integer reply that is not a decimal 64-bit integer.
    case invalidInteger(String)
    /// A bulk string longer than ``RESPParseLimits/maxBulkLength``.
    case bulkTooLong(length: Int, limit: Int)
    /// An array with more elements than ``RESPParseLimits/maxAggregateCount``.
    case tooManyElements(count: Int, limit: Int)
    /// Arrays nested deeper than ``RESPParseLimits/maxDepth``.
    case tooDeep(limit: Int)
    /// A line longer than ``RESPParseLimits/maxLineLength``.
    case lineTooLong(limit: Int)
    /// A bulk string not followed by CRLF, or a line with a bare CR or LF.
    case missingCRLF

    public var description: String {
        switch self {
        case .unknownType(let b): "unknown RESP type byte 0x\(String(b, radix: 16))"
        case .invalidLength(let s): "invalid RESP length \"\(s)\""
        case .invalidInteger(let s): "invalid RESP integer \"\(s)\""
        case .bulkTooLong(let length, let limit): "RESP bulk string of \(length) bytes is over the limit (\(limit))"
        case .tooManyElements(let count, let limit): "RESP array of \(count) elements is over the limit (\(limit))"
        case .tooDeep(let limit): "RESP arrays nested deeper than \(limit)"
        case .lineTooLong(let limit): "RESP line longer than \(limit) bytes"
        case .missingCRLF: "RESP value not terminated by CRLF"
        }
    }
}
