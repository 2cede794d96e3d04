/// Incremental, bounded parser of one HTTP/1.x response head (RFC 9112 §4), used by the
/// client to read the answer to its upgrade request.
///
/// Same framing rules, limits and `consumed` contract as ``HTTPRequestParser``. Status line:
/// `HTTP/D.D SP 3DIGIT SP reason`; the reason may be empty, and a missing space after the
/// status code is tolerated (RFC 9112 §4 asks recipients to be lenient about the reason).
/// It never reads a body: for a non-101 answer the caller reads it itself.
public struct HTTPResponseParser: Sendable {
    private var scanner: HTTPHeadScanner<ResponseKind>

    /// Creates a parser that enforces `limits` (head size and field count).
    public init(limits: HTTPParseLimits = .default) {
        scanner = HTTPHeadScanner(limits: limits)
    }

    /// The limits this parser enforces.
    public var limits: HTTPParseLimits { scanner.limits }

    /// Feeds the next chunk; see ``HTTPRequestParser/parse(_:)-(UnsafeRawBufferPointer)``.
    public mutating func parse(_ chunk: UnsafeRawBufferPointer) throws(HTTPParseError) -> HTTPParseResult<HTTPResponseHead> {
        try scanner.parse(chunk)
    }

    /// Convenience for ``parse(_:)-(UnsafeRawBufferPointer)`` on an array.
    public mutating func parse(_ chunk: [UInt8]) throws(HTTPParseError) -> HTTPParseResult<HTTPResponseHead> {
        var result: Result<HTTPParseResult<HTTPResponseHead>, HTTPParseError> = .success(.needMoreData)
        chunk.withUnsafeBytes { buffer in
            do throws(HTTPParseError) { result = .success(try scanner.parse(buffer)) } catch { result = .failure(error) }
        }
        return try result.get()
    }
}

enum ResponseKind: HTTPHeadKind {
    typealias StartLine = (version: String, status: Int, reason: String)

    /// `status-line = HTTP-version SP status-code SP [ reason-phrase ]` (RFC 9112 §4).
    static func parseStartLine(_ line: UnsafeRawBufferPointer) throws(HTTPParseError) -> StartLine {
        guard let space = line.firstIndex(of: UInt8(ascii: " ")) else { throw .malformedStartLine }
        let version = line[..<space]
        guard HTTPSyntax.parseVersion(version) != nil else { throw .invalidVersion }
        let rest = line[(space + 1)...]
        let statusBytes = rest.prefix(3)
        guard statusBytes.count == 3 else { throw .invalidStatus }
        var status = 0
        for byte in statusBytes {
            guard let digit = HTTPSyntax.digitValue(byte) else { throw .invalidStatus }
            status = status * 10 + digit
        }
        guard status >= 100 else { throw .invalidStatus }
        var reason = rest.dropFirst(3)
        if let first = reason.first {
            guard first == UInt8(ascii: " ") else { throw .invalidStatus }
            reason = reason.dropFirst()
        }
        guard reason.allSatisfy(HTTPSyntax.isFieldValueByte) else { throw .malformedStartLine }
        return (String(decoding: version, as: UTF8.self), status, HTTPSyntax.decodeText(reason))
    }

    static func makeHead(_ startLine: StartLine, _ headers: HTTPHeaders) -> HTTPResponseHead {
        HTTPResponseHead(version: startLine.version, status: startLine.status, reason: startLine.reason, headers: headers)
    }
}
