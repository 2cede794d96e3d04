/// What distinguishes a request head from a response head: the start line.
protocol HTTPHeadKind {
    associatedtype StartLine: Sendable
    associatedtype Head: Sendable & Equatable
    /// Parses the start line (terminator already removed, guaranteed free of CR and LF), read in
    /// place: only the strings it returns are copied out.
    static func parseStartLine(_ line: UnsafeRawBufferPointer) throws(HTTPParseError) -> StartLine
    static func makeHead(_ startLine: StartLine, _ headers: HTTPHeaders) -> Head
}

/// The incremental, bounded line scanner shared by ``HTTPRequestParser`` and
/// ``HTTPResponseParser`` (RFC 9112 §2.1–§2.2, §5).
///
/// Line terminator: CRLF, and also a bare LF (RFC 9112 §2.2 allows a recipient to accept a
/// lone LF; `curl`-style test clients and hand-written scripts sometimes send it). A CR that
/// is not immediately followed by LF is rejected. Empty lines before the start line are
/// ignored (RFC 9112 §2.2 "SHOULD ignore at least one empty line"); they count toward the
/// byte limit.
///
/// Every byte is looked at once: each chunk is searched for LF from where the previous search
/// stopped, and only the current, unterminated line is buffered.
struct HTTPHeadScanner<Kind: HTTPHeadKind>: Sendable {
    let limits: HTTPParseLimits
    private var line: [UInt8] = []
    private var headBytes = 0
    private var startLine: Kind.StartLine?
    private var headers = HTTPHeaders()
    private var failure: HTTPParseError?

    init(limits: HTTPParseLimits) { self.limits = limits }

    /// Fields room is made for at the start line: a browser's upgrade request has 12–16.
    static var usualFieldCount: Int { 16 }

    mutating func parse(_ chunk: UnsafeRawBufferPointer) throws(HTTPParseError) -> HTTPParseResult<Kind.Head> {
        if let failure { throw failure }
        do {
            return try scan(chunk)
        } catch {
            failure = error
            line = []
            throw error
        }
    }

    private mutating func scan(_ bytes: UnsafeRawBufferPointer) throws(HTTPParseError) -> HTTPParseResult<Kind.Head> {
        var start = 0
        while start < bytes.count {
            let remaining = limits.maxHeaderBytes - headBytes
            guard let newline = bytes[start...].firstIndex(of: UInt8(ascii: "\n")) else {
                // No terminator in the rest of this chunk: buffer it, unless it already breaks the limit.
                let count = bytes.count - start
                guard count <= remaining else { throw .headTooLarge }
                headBytes += count
                line.append(contentsOf: bytes[start...])
                return .needMoreData
            }
            let count = newline - start + 1
            guard count <= remaining else { throw .headTooLarge }
            headBytes += count
            let head: Kind.Head?
            if line.isEmpty {
                // The whole line is in this chunk (the usual case): parsed where it lies.
                head = try completeLine(UnsafeRawBufferPointer(rebasing: bytes[start..<newline]))
            } else {
                // The line began in an earlier chunk: completed in `line`, parsed from there.
                line.append(contentsOf: bytes[start..<newline])
                var pending = line
                line = []
                let result = pending.withUnsafeBytes { buffer in
                    Result { () throws(HTTPParseError) in try completeLine(buffer) }
                }
                pending.removeAll(keepingCapacity: true)
                line = pending
                head = try result.get()
            }
            start = newline + 1
            if let head {
                reset()
                return .complete(head, consumed: start)
            }
        }
        return .needMoreData
    }

    /// Handles one line (LF removed); returns the head when it was the final empty line.
    private mutating func completeLine(_ raw: UnsafeRawBufferPointer) throws(HTTPParseError) -> Kind.Head? {
        var end = raw.count
        if end > 0, raw[end - 1] == UInt8(ascii: "\r") { end -= 1 }
        let content = UnsafeRawBufferPointer(rebasing: raw[0..<end])
        for index in 0..<content.count where content[index] == UInt8(ascii: "\r") { throw .bareCarriageReturn }

        guard let startLine else {
            if !content.isEmpty {
                self.startLine = try Kind.parseStartLine(content)
                // One allocation for a usual head's fields, not one per doubling (1, 2, 4, 8…).
                headers.reserveCapacity(max(0, min(limits.maxHeaderCount, Self.usualFieldCount)))
            }
            return nil
        }
        if content.isEmpty { return Kind.makeHead(startLine, headers) }
        guard headers.count < limits.maxHeaderCount else { throw .tooManyHeaders }
        let field = try Self.parseField(content)
        headers.add(name: field.name, value: field.value)
        return nil
    }

    /// `field-line = field-name ":" OWS field-value OWS` (RFC 9112 §5), over the line's bytes.
    private static func parseField(_ bytes: UnsafeRawBufferPointer) throws(HTTPParseError) -> (name: String, value: String) {
        guard let first = bytes.first else { throw .malformedHeaderLine }
        if HTTPSyntax.isOWS(first) { throw .obsoleteLineFolding }
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")) else { throw .malformedHeaderLine }
        let name = UnsafeRawBufferPointer(rebasing: bytes[..<colon])
        guard HTTPSyntax.isToken(name) else { throw .invalidHeaderName }
        var start = colon + 1, end = bytes.count
        while start < end, HTTPSyntax.isOWS(bytes[start]) { start += 1 }
        while end > start, HTTPSyntax.isOWS(bytes[end - 1]) { end -= 1 }
        let value = UnsafeRawBufferPointer(rebasing: bytes[start..<end])
        var ascii = true
        for byte in value {
            guard HTTPSyntax.isFieldValueByte(byte) else { throw .invalidHeaderValue }
            if byte >= 0x80 { ascii = false }
        }
        // ASCII is valid UTF-8 as it is; anything else goes through decodeText's rules.
        let text = ascii ? Self.string(value) : HTTPSyntax.decodeText(value)
        return (fieldName(name), text)
    }

    /// The name as a `String`: one of `longKnownFieldNames` (a literal: no allocation) when it is
    /// spelled exactly so, else a new string (names of up to 15 bytes need no allocation anyway).
    private static func fieldName(_ bytes: UnsafeRawBufferPointer) -> String {
        if bytes.count > 15 {
            for known in longKnownFieldNames where known.utf8.count == bytes.count
                && known.utf8.withContiguousStorageIfAvailable({ k in (0..<k.count).allSatisfy { k[$0] == bytes[$0] } }) == true {
                return known
            }
        }
        return string(bytes)
    }

    /// ASCII bytes as a string: copied straight into the string's storage.
    private static func string(_ bytes: UnsafeRawBufferPointer) -> String {
        String(unsafeUninitializedCapacity: bytes.count) { storage in
            UnsafeMutableRawBufferPointer(storage).copyMemory(from: bytes)
            return bytes.count
        }
    }

    private mutating func reset() {
        line = []
        headBytes = 0
        startLine = nil
        headers = HTTPHeaders()
    }
}

/// WebSocket field names too long for a small (inline) string, spelled as RFC 6455 does: the
/// head scanner hands these literals out instead of allocating a string per handshake.
private let longKnownFieldNames = ["Sec-WebSocket-Key", "Sec-WebSocket-Version", "Sec-WebSocket-Extensions",
                                   "Sec-WebSocket-Protocol", "Sec-WebSocket-Accept"]
