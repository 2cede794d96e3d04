/// A complete, simple HTTP/1.1 response: handshake rejections (400/401/403/404/405/426/431/503)
/// with a body, and plain answers from an HTTP handler that shares the WebSocket port.
///
/// Serialization (``bytes``) is always safe to write to the wire: field names that are not
/// tokens are dropped, control characters (CR, LF, NUL, …) in values and in the reason are
/// replaced by spaces, and framing is ours alone (`Content-Length` and `Connection: close`;
/// any such fields in ``headers`` are ignored).
public struct HTTPResponse: Sendable, Equatable {
    /// The status code; values outside 100–999 are serialized as 500.
    public var status: Int
    /// The reason phrase; defaults to ``reasonPhrase(for:)``.
    public var reason: String
    /// Extra header fields (e.g. `Content-Type`, `Allow`, `Sec-WebSocket-Version`).
    public var headers: HTTPHeaders
    /// The body; not sent for 1xx, 204 and 304 responses, which cannot carry one (RFC 9110 §6.4.1).
    public var body: [UInt8]

    /// Creates a response; ``reason`` is the standard phrase of `status` (``reasonPhrase(for:)``).
    public init(status: Int, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.status = status
        self.reason = Self.reasonPhrase(for: status)
        self.headers = headers
        self.body = body
    }

    /// A response with `Content-Type: application/json` and `jsonBody` (not validated) as body.
    public static func json(status: Int, _ jsonBody: String) -> HTTPResponse {
        HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: Array(jsonBody.utf8))
    }

    /// An error response with the body `{"error":{"message":…,"type":…,"code":…}}`: the one
    /// builder of every rejection Switchboard sends (``HTTPParseError/response``,
    /// ``WebSocketHandshakeError/response``, the server's own 403/404/408/503).
    ///
    /// The body always has exactly these three keys. Strings are JSON-escaped (RFC 8259 §7):
    /// `"` and `\` are backslash-escaped, control characters become `\n`, `\r`, `\t`, `\b`,
    /// `\f` or `\u00XX`. `type` is one of ``HTTPErrorType``'s names (a string literal also
    /// works); `code` is a machine-readable string (e.g. `bad_key`), or `null` when `nil`.
    public static func error(status: Int, message: String, type: HTTPErrorType, code: String? = nil) -> HTTPResponse {
        let codeJSON = code.map(JSONString.quoted) ?? "null"
        return json(status: status, "{\"error\":{\"message\":\(JSONString.quoted(message)),\"type\":\(JSONString.quoted(type.rawValue)),\"code\":\(codeJSON)}}")
    }

    /// The serialized response: status line, sanitized headers, `Content-Length` (except for
    /// 1xx/204/304), `Connection: close`, empty line, body.
    public var bytes: [UInt8] { bytes(answering: "GET") }

    /// The serialized response to a request with `method`: as ``bytes``, except that the answer
    /// to a `HEAD` ends after its head, which still gives the `Content-Length` of the body a
    /// `GET` would get (RFC 9110 §9.3.2).
    public func bytes(answering method: String) -> [UInt8] {
        let code = (100...999).contains(status) ? status : 500
        let hasBody = !(code < 200 || code == 204 || code == 304)
        let sendsBody = hasBody && method != "HEAD"
        var out: [UInt8] = []
        out.reserveCapacity(128 + body.count)
        out += Array("HTTP/1.1 \(code) ".utf8)
        out += Self.sanitized(reason)
        out += [13, 10]
        for (name, value) in headers where HTTPSyntax.isToken(name) {
            if ["content-length", "transfer-encoding", "connection"].contains(HTTPSyntax.asciiLowercased(name)) { continue }
            out += Array(name.utf8)
            out += [UInt8(ascii: ":"), UInt8(ascii: " ")]
            out += Self.sanitized(value)
            out += [13, 10]
        }
        if hasBody { out += Array("Content-Length: \(body.count)\r\n".utf8) }
        out += Array("Connection: close\r\n\r\n".utf8)
        if sendsBody { out += body }
        return out
    }

    private static func sanitized(_ value: String) -> [UInt8] {
        value.utf8.map { HTTPSyntax.isFieldValueByte($0) ? $0 : UInt8(ascii: " ") }
    }

    /// The standard reason phrase for `status` (RFC 9110 §15, RFC 6585), or `"Unknown"`.
    public static func reasonPhrase(for status: Int) -> String {
        switch status {
        case 100: return "Continue"
        case 101: return "Switching Protocols"
        case 200: return "OK"
        case 201: return "Created"
        case 202: return "Accepted"
        case 204: return "No Content"
        case 301: return "Moved Permanently"
        case 302: return "Found"
        case 304: return "Not Modified"
        case 307: return "Temporary Redirect"
        case 308: return "Permanent Redirect"
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 408: return "Request Timeout"
        case 409: return "Conflict"
        case 413: return "Content Too Large"
        case 414: return "URI Too Long"
        case 426: return "Upgrade Required"
        case 429: return "Too Many Requests"
        case 431: return "Request Header Fields Too Large"
        case 500: return "Internal Server Error"
        case 501: return "Not Implemented"
        case 502: return "Bad Gateway"
        case 503: return "Service Unavailable"
        case 504: return "Gateway Timeout"
        case 505: return "HTTP Version Not Supported"
        default: return "Unknown"
        }
    }
}
