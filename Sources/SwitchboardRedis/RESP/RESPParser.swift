/// An incremental RESP2 parser: bytes in as they arrive, values out as they complete.
///
/// Resumable: a value split over many reads is never re-parsed from its start (partial arrays
/// wait on a stack, a bulk string's payload is awaited by length), so parsing is linear in the
/// input whatever the chunking. Bounded by ``RESPParseLimits``: a bulk string, array or line
/// over the limits fails from its header alone, before its payload is buffered. After an
/// error the parser stays failed.
public struct RESPParser: Sendable {
    private let limits: RESPParseLimits
    private var buffer: [UInt8] = []
    private var readIndex = 0
    /// Where the search for the current line's LF resumes.
    private var scanIndex = 0
    /// Arrays being filled: elements expected, elements so far.
    private var stack: [(expected: Int, items: [RESPValue])] = []
    /// The length of a bulk string whose header was read and whose payload is awaited.
    private var pendingBulk: Int?
    private var failure: RESPParseError?

    /// A parser with `limits`.
    public init(limits: RESPParseLimits = .default) {
        self.limits = limits
    }

    /// Bytes received and not yet consumed by a complete value.
    public var bufferedByteCount: Int { buffer.count - readIndex }

    /// Adds received bytes.
    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        compact()
        buffer.append(contentsOf: bytes)
    }

    /// Adds received bytes.
    public mutating func append(_ bytes: [UInt8]) {
        compact()
        buffer.append(contentsOf: bytes)
    }

    /// Drops the consumed prefix once it is large.
    private mutating func compact() {
        guard readIndex >= 4096, readIndex * 2 >= buffer.count else { return }
        buffer.removeFirst(readIndex)
        scanIndex -= readIndex
        readIndex = 0
    }

    /// The next complete value, or nil until more bytes arrive. Throws on invalid input (and
    /// again on every later call).
    public mutating func next() throws(RESPParseError) -> RESPValue? {
        if let failure { throw failure }
        do {
            return try parseNext()
        } catch {
            failure = error
            throw error
        }
    }

    private mutating func parseNext() throws(RESPParseError) -> RESPValue? {
        while true {
            var value: RESPValue
            if let length = pendingBulk {
                guard buffer.count - readIndex >= length + 2 else { return nil }
                let end = readIndex + length
                guard buffer[end] == 13, buffer[end + 1] == 10 else { throw .missingCRLF }
                value = .bulkString(Array(buffer[readIndex..<end]))
                readIndex = end + 2
                scanIndex = readIndex
                pendingBulk = nil
            } else {
                guard let (type, line) = try nextLine() else { return nil }
                switch type {
                case UInt8(ascii: "+"):
                    value = .simpleString(String(decoding: line, as: UTF8.self))
                case UInt8(ascii: "-"):
                    value = .error(String(decoding: line, as: UTF8.self))
                case UInt8(ascii: ":"):
                    guard let n = Self.decimal(line) else { throw .invalidInteger(String(decoding: line, as: UTF8.self)) }
                    value = .integer(n)
                case UInt8(ascii: "$"):
                    let length = try Self.length(line)
                    if length < 0 {
                        value = .null
                    } else {
                        guard length <= limits.maxBulkLength else {
                            throw .bulkTooLong(length: length, limit: limits.maxBulkLength)
                        }
                        pendingBulk = length
                        continue
                    }
                case UInt8(ascii: "*"):
                    let count = try Self.length(line)
                    if count < 0 {
                        value = .null
                    } else {
                        // An empty array counts as a level too.
                        guard stack.count < limits.maxDepth else { throw .tooDeep(limit: limits.maxDepth) }
                        guard count <= limits.maxAggregateCount else {
                            throw .tooManyElements(count: count, limit: limits.maxAggregateCount)
                        }
                        if count == 0 {
                            value = .array([])
                            break
                        }
                        // Capacity grows with what arrives, never from the header alone.
                        stack.append((count, []))
                        continue
                    }
                default:
                    throw .unknownType(type)
                }
            }
            // Hand the value to the innermost open array, closing every array it completes.
            while let top = stack.indices.last {
                stack[top].items.append(value)
                guard stack[top].items.count == stack[top].expected else { break }
                value = .array(stack.removeLast().items)
            }
            if stack.isEmpty { return value }
        }
    }

    /// The next line: its type byte and the bytes between it and CRLF; nil until its LF arrives.
    private mutating func nextLine() throws(RESPParseError) -> (UInt8, ArraySlice<UInt8>)? {
        if scanIndex < readIndex { scanIndex = readIndex }
        var i = scanIndex
        while i < buffer.count && buffer[i] != 10 { i += 1 }
        guard i < buffer.count else {
            scanIndex = i
            // Type byte + content + CR so far.
            if buffer.count - readIndex > limits.maxLineLength + 2 { throw .lineTooLong(limit: limits.maxLineLength) }
            return nil
        }
        // buffer[i] is LF: it must follow a CR, and the line must hold a type byte.
        guard i - readIndex >= 2, buffer[i - 1] == 13 else { throw .missingCRLF }
        let content = buffer[(readIndex + 1)..<(i - 1)]
        guard content.count <= limits.maxLineLength else { throw .lineTooLong(limit: limits.maxLineLength) }
        if content.contains(13) { throw .missingCRLF }
        let type = buffer[readIndex]
        readIndex = i + 1
        scanIndex = readIndex
        return (type, content)
    }

    /// `-1` (nil length) or a non-negative decimal; anything else is invalid.
    private static func length(_ line: ArraySlice<UInt8>) throws(RESPParseError) -> Int {
        if line.elementsEqual([UInt8(ascii: "-"), UInt8(ascii: "1")]) { return -1 }
        guard let first = line.first, first != UInt8(ascii: "-"), let n = decimal(line), let length = Int(exactly: n) else {
            throw .invalidLength(String(decoding: line, as: UTF8.self))
        }
        return length
    }

    /// An optional `-` and at least one digit, within Int64; nil otherwise.
    private static func decimal(_ line: ArraySlice<UInt8>) -> Int64? {
        var digits = line[...]
        var negative = false
        if digits.first == UInt8(ascii: "-") {
            negative = true
            digits = digits.dropFirst()
        }
        guard !digits.isEmpty else { return nil }
        var value: Int64 = 0
        for byte in digits {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            let digit = Int64(byte - UInt8(ascii: "0"))
            let (times10, o1) = value.multipliedReportingOverflow(by: 10)
            let (next, o2) = negative ? times10.subtractingReportingOverflow(digit) : times10.addingReportingOverflow(digit)
            guard !o1, !o2 else { return nil }
            value = next
        }
        return value
    }
}
