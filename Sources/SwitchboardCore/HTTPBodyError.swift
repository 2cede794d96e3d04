/// Why the body of a plain HTTP request is refused before it is read (``HTTPBodyFraming``).
///
/// A struct over a private enum so that new cases are not a breaking change; compare with the
/// static members (`error == .lengthRequired`). ``status`` is the HTTP status a server should
/// answer with; ``response`` is a ready-made rejection with the JSON error body.
public struct HTTPBodyError: Error, Sendable, Equatable, CustomStringConvertible {
    private enum Kind: Sendable, Equatable {
        case bodyTooLarge, lengthRequired, transferEncoding, invalidContentLength
    }

    private let kind: Kind

    private init(_ kind: Kind) { self.kind = kind }

    /// The announced `Content-Length` exceeds the limit (413, code `body_too_large`,
    /// RFC 9110 §15.5.14). Decided from the head alone, before any body byte is read.
    public static let bodyTooLarge = Self(.bodyTooLarge)
    /// A `POST`, `PUT` or `PATCH` without `Content-Length` (411, code `length_required`,
    /// RFC 9110 §15.5.12).
    public static let lengthRequired = Self(.lengthRequired)
    /// The request has a `Transfer-Encoding` field (chunked or any other coding): bodies are
    /// read by `Content-Length` only (411, code `length_required`, RFC 9112 §6.1 allows it).
    public static let transferEncoding = Self(.transferEncoding)
    /// `Content-Length` is not a decimal number (a sign, a space inside, a hexadecimal or
    /// empty value), or several values differ (400, code `bad_request`, RFC 9112 §6.3).
    public static let invalidContentLength = Self(.invalidContentLength)

    /// The HTTP status a server should answer with: 413, 411 or 400.
    public var status: Int {
        switch kind {
        case .bodyTooLarge: return 413
        case .lengthRequired, .transferEncoding: return 411
        case .invalidContentLength: return 400
        }
    }

    /// The machine-readable code of the JSON error body: `body_too_large`, `length_required`
    /// or `bad_request`.
    public var code: String {
        switch kind {
        case .bodyTooLarge: return "body_too_large"
        case .lengthRequired, .transferEncoding: return "length_required"
        case .invalidContentLength: return "bad_request"
        }
    }

    /// A `Connection: close` rejection carrying ``status`` and the JSON error body of
    /// ``HTTPResponse/error(status:message:type:code:)`` (type `invalid_request_error`).
    public var response: HTTPResponse {
        HTTPResponse.error(status: status, message: description, type: .invalidRequest, code: code)
    }

    /// A short English explanation, e.g. `request body exceeds the size limit`.
    public var description: String {
        switch kind {
        case .bodyTooLarge: return "request body exceeds the size limit"
        case .lengthRequired: return "a request with a body needs a Content-Length"
        case .transferEncoding: return "Transfer-Encoding is not accepted; send a Content-Length"
        case .invalidContentLength: return "invalid Content-Length"
        }
    }
}
