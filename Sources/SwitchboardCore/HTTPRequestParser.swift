/// Incremental, bounded parser of one HTTP/1.x request head (RFC 9112 §2–§5).
///
/// Feed chunks as they arrive with ``parse(_:)-([UInt8])``. The parser buffers at most
/// ``HTTPParseLimits/maxHeaderBytes`` and reports exactly how many bytes of the completing
/// chunk belonged to the head, so bytes after the head (a pipelined request, or WebSocket
/// frames sent optimistically) stay with the caller. It never reads a body.
///
/// Accepted syntax: `method SP request-target SP HTTP/D.D`, single spaces, method a token,
/// target visible ASCII only. Lines end in CRLF or a bare LF; a CR anywhere else, obs-fold,
/// whitespace before a colon, a non-token field name and control characters in a value are
/// rejected. Field values may contain obs-text (bytes ≥ 0x80): they are decoded as UTF-8, or
/// as ISO-8859-1 when not valid UTF-8.
///
/// After `.complete` the parser is reset and can parse a following head. After an error it
/// stays failed and rethrows that error.
public struct HTTPRequestParser: Sendable {
    private var scanner: HTTPHeadScanner<RequestKind>

    /// Creates a parser that enforces `limits` (head size and field count).
    public init(limits: HTTPParseLimits = .default) {
        scanner = HTTPHeadScanner(limits: limits)
    }

    /// The limits this parser enforces.
    public var limits: HTTPParseLimits { scanner.limits }

    /// Feeds the next chunk.
    ///
    /// - Returns: `.needMoreData` when the whole chunk was consumed and buffered, or
    ///   `.complete(head, consumed: n)` where `n` bytes of THIS chunk belonged to the head.
    /// - Throws: ``HTTPParseError`` (``HTTPParseError/status`` 431 for size limits, detected as
    ///   soon as the buffered head exceeds them; 400 for syntax).
    public mutating func parse(_ chunk: UnsafeRawBufferPointer) throws(HTTPParseError) -> HTTPParseResult<HTTPRequestHead> {
        try scanner.parse(chunk)
    }

    /// Convenience for ``parse(_:)-(UnsafeRawBufferPointer)`` on an array.
    public mutating func parse(_ chunk: [UInt8]) throws(HTTPParseError) -> HTTPParseResult<HTTPRequestHead> {
        var result: Result<HTTPParseResult<HTTPRequestHead>, HTTPParseError> = .success(.needMoreData)
        chunk.withUnsafeBytes { buffer in
            do throws(HTTPParseError) { result = .success(try scanner.parse(buffer)) } catch { result = .failure(error) }
        }
        return try result.get()
    }
}

enum RequestKind: HTTPHeadKind {
    typealias StartLine = (method: String, target: String, version: String)

    /// `request-line = method SP request-target SP HTTP-version` (RFC 9112 §3).
    static func parseStartLine(_ line: UnsafeRawBufferPointer) throws(HTTPParseError) -> StartLine {
        // Exactly two spaces: three non-split parts, found by index (no array of slices).
        guard let first = line.firstIndex(of: UInt8(ascii: " ")),
              let second = line[(first + 1)...].firstIndex(of: UInt8(ascii: " ")),
              line[(second + 1)...].firstIndex(of: UInt8(ascii: " ")) == nil
        else { throw .malformedStartLine }
        let method = line[..<first], target = line[(first + 1)..<second], version = line[(second + 1)...]
        guard HTTPSyntax.isToken(method),
              !target.isEmpty, target.allSatisfy(HTTPSyntax.isTargetByte)
        else { throw .malformedStartLine }
        guard HTTPSyntax.parseVersion(version) != nil else { throw .invalidVersion }
        return (String(decoding: method, as: UTF8.self),
                String(decoding: target, as: UTF8.self),
                String(decoding: version, as: UTF8.self))
    }

    static func makeHead(_ startLine: StartLine, _ headers: HTTPHeaders) -> HTTPRequestHead {
        HTTPRequestHead(method: startLine.method, target: startLine.target, version: startLine.version, headers: headers)
    }
}
