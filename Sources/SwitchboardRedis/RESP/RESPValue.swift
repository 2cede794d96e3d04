/// One RESP2 value: a reply from Redis, or an element of one.
public enum RESPValue: Sendable, Hashable, CustomStringConvertible {
    /// `+OK`
    case simpleString(String)
    /// `-ERR message`
    case error(String)
    /// `:42`
    case integer(Int64)
    /// `$3\r\nabc`: binary-safe.
    case bulkString([UInt8])
    /// `$-1` or `*-1`.
    case null
    /// `*2 …`
    case array([RESPValue])

    /// A simple string, or a bulk string decoded as UTF-8 (invalid bytes replaced).
    public var string: String? {
        switch self {
        case .simpleString(let s): s
        case .bulkString(let b): String(decoding: b, as: UTF8.self)
        default: nil
        }
    }

    /// An integer, or a string holding a decimal integer.
    public var int: Int64? {
        switch self {
        case .integer(let i): i
        case .simpleString, .bulkString: string.flatMap { Int64($0) }
        default: nil
        }
    }

    /// The elements of an array.
    public var array: [RESPValue]? {
        if case .array(let a) = self { return a }
        return nil
    }

    /// Whether this is the null bulk string or null array.
    public var isNull: Bool { self == .null }

    /// Readable, with long bulk strings cut after 64 bytes.
    public var description: String {
        switch self {
        case .simpleString(let s): return "+\(s)"
        case .error(let s): return "-\(s)"
        case .integer(let i): return ":\(i)"
        case .null: return "(nil)"
        case .bulkString(let b):
            let shown = String(decoding: b.prefix(64), as: UTF8.self)
            return b.count > 64 ? "\"\(shown)\"… (\(b.count) bytes)" : "\"\(shown)\""
        case .array(let a): return "[" + a.map(\.description).joined(separator: ", ") + "]"
        }
    }
}
