/// Why an HTTP head was rejected by ``HTTPRequestParser`` or ``HTTPResponseParser``.
///
/// A struct over a private enum so that new cases are not a breaking change; compare with the
/// static members (`error == .headTooLarge`). ``status`` is the HTTP status a server should
/// answer with (400 or 431); ``response`` is a ready-made rejection.
public struct HTTPParseError: Error, Sendable, Equatable, CustomStringConvertible {
    private enum Kind: Sendable, Equatable {
        case headTooLarge, tooManyHeaders, malformedStartLine, invalidVersion, invalidStatus
        case malformedHeaderLine, obsoleteLineFolding, invalidHeaderName, invalidHeaderValue, bareCarriageReturn
    }

    private let kind: Kind

    private init(_ kind: Kind) { self.kind = kind }

    /// The head exceeded ``HTTPParseLimits/maxHeaderBytes`` (431, RFC 6585 §5).
    public static let headTooLarge = Self(.headTooLarge)
    /// The head has more than ``HTTPParseLimits/maxHeaderCount`` fields (431).
    public static let tooManyHeaders = Self(.tooManyHeaders)
    /// The request or status line does not have the RFC 9112 §3 / §4 shape (400).
    public static let malformedStartLine = Self(.malformedStartLine)
    /// The version is not `HTTP/D.D` (400).
    public static let invalidVersion = Self(.invalidVersion)
    /// The status code is not three digits (400; only produced by the response parser).
    public static let invalidStatus = Self(.invalidStatus)
    /// A header line has no colon (400).
    public static let malformedHeaderLine = Self(.malformedHeaderLine)
    /// A header line starts with whitespace: obs-fold, rejected per RFC 9112 §5.2 (400).
    public static let obsoleteLineFolding = Self(.obsoleteLineFolding)
    /// A field name is empty or not a token, including whitespace before the colon
    /// (RFC 9112 §5.1) (400).
    public static let invalidHeaderName = Self(.invalidHeaderName)
    /// A field value contains NUL, a control character other than HTAB, or DEL (400).
    public static let invalidHeaderValue = Self(.invalidHeaderValue)
    /// A CR not immediately followed by LF (RFC 9112 §2.2) (400).
    public static let bareCarriageReturn = Self(.bareCarriageReturn)

    /// The HTTP status a server should answer with: 431 for size limits, otherwise 400.
    public var status: Int {
        switch kind {
        case .headTooLarge, .tooManyHeaders: return 431
        default: return 400
        }
    }

    /// A `Connection: close` rejection carrying ``status`` and the JSON error body of
    /// ``HTTPResponse/error(status:message:type:code:)`` (type `invalid_request_error`, code
    /// e.g. `head_too_large`).
    public var response: HTTPResponse {
        HTTPResponse.error(status: status, message: description, type: .invalidRequest, code: code)
    }

    private var code: String {
        switch kind {
        case .headTooLarge: return "head_too_large"
        case .tooManyHeaders: return "too_many_headers"
        case .malformedStartLine: return "malformed_start_line"
        case .invalidVersion: return "invalid_version"
        case .invalidStatus: return "invalid_status"
        case .malformedHeaderLine: return "malformed_header_line"
        case .obsoleteLineFolding: return "obsolete_line_folding"
        case .invalidHeaderName: return "invalid_header_name"
        case .invalidHeaderValue: return "invalid_header_value"
        case .bareCarriageReturn: return "bare_carriage_return"
        }
    }

    /// A short English explanation, e.g. `HTTP head exceeds the size limit`.
    public var description: String {
        switch kind {
        case .headTooLarge: return "HTTP head exceeds the size limit"
        case .tooManyHeaders: return "HTTP head has too many header fields"
        case .malformedStartLine: return "malformed HTTP start line"
        case .invalidVersion: return "invalid HTTP version"
        case .invalidStatus: return "invalid HTTP status code"
        case .malformedHeaderLine: return "header line without a colon"
        case .obsoleteLineFolding: return "obsolete header line folding is not accepted"
        case .invalidHeaderName: return "invalid header field name"
        case .invalidHeaderValue: return "invalid character in header field value"
        case .bareCarriageReturn: return "CR not followed by LF in HTTP head"
        }
    }
}
