/// How the body of a plain HTTP request is delimited, decided from its head alone
/// (RFC 9112 §6.3), for a server that reads bodies by `Content-Length` only.
///
/// The rules of ``decide(_:limit:)``, in order:
/// 1. Any `Transfer-Encoding` field (chunked or not, whatever its value) is refused:
///    ``HTTPBodyError/transferEncoding`` (411). Chunked bodies are not read; a client must
///    send a `Content-Length`. This also removes the `Transfer-Encoding` + `Content-Length`
///    ambiguity behind request smuggling.
/// 2. `Content-Length` must be one or more ASCII digits (RFC 9110 §8.6): no sign, no space or
///    tab inside the number, no hexadecimal, not empty. Several fields, or a comma-separated
///    list, are accepted when every value is the same number (`42, 42`; leading zeros do not
///    make a value different); differing values are refused. Both:
///    ``HTTPBodyError/invalidContentLength`` (400).
/// 3. A length above `limit` is refused at once, before any body byte is read:
///    ``HTTPBodyError/bodyTooLarge`` (413). Numbers too large for `Int` count as above it.
/// 4. Without `Content-Length`, `POST`, `PUT` and `PATCH` are refused with
///    ``HTTPBodyError/lengthRequired`` (411); every other method (`GET`, `HEAD`, `DELETE`,
///    `OPTIONS`, …) has no body (``none``).
///
/// Pure: no I/O; the same head always gives the same answer.
public enum HTTPBodyFraming: Sendable, Equatable {
    /// No body: the request ends with its head.
    case none
    /// A body of exactly this many bytes (0 included), at most the limit.
    case length(Int)

    /// The methods that must announce a length (they carry a body by definition).
    static let methodsRequiringLength: Set<String> = ["POST", "PUT", "PATCH"]

    /// Decides the framing of `head`'s body under `limit` bytes (a negative limit counts as 0).
    ///
    /// - Throws: ``HTTPBodyError`` with the status to answer (411, 400 or 413); see the rules
    ///   above.
    public static func decide(_ head: HTTPRequestHead, limit: Int) throws(HTTPBodyError) -> HTTPBodyFraming {
        let limit = max(0, limit)
        if head.headers.contains(name: "Transfer-Encoding") { throw .transferEncoding }
        guard let length = try contentLength(head) else {
            if methodsRequiringLength.contains(head.method) { throw .lengthRequired }
            return .none
        }
        guard let bytes = length, bytes <= limit else { throw .bodyTooLarge }
        return .length(bytes)
    }

    /// The length `head` announces when its `Content-Length` is valid by the rules above
    /// (digits only, repeated values equal), whatever the limit; nil when there is none, or it
    /// is invalid, or too large for `Int`. A server that refused the body as too large can use
    /// it to read and drop what the client still sends before closing.
    public static func announcedLength(_ head: HTTPRequestHead) -> Int? {
        (try? contentLength(head)).flatMap { $0 }
    }

    /// nil: no `Content-Length`; `.some(nil)`: a valid number too large for `Int`.
    private static func contentLength(_ head: HTTPRequestHead) throws(HTTPBodyError) -> Int?? {
        var length: Int?? = .none
        for field in head.headers.values(for: "Content-Length") {
            for element in field.utf8.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false) {
                let value = try parseLength(element)
                if let previous = length {
                    if previous != value { throw .invalidContentLength }
                } else {
                    length = .some(value)
                }
            }
        }
        return length
    }

    /// Whether the client waits for `100 Continue` before sending its body
    /// (`Expect: 100-continue`, case-insensitive, RFC 9110 §10.1.1).
    public static func expectsContinue(_ head: HTTPRequestHead) -> Bool {
        head.headers.tokens(for: "Expect").contains("100-continue")
    }

    /// The interim answer to ``expectsContinue(_:)``: `HTTP/1.1 100 Continue` and an empty line.
    public static let continueResponse: [UInt8] = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)

    /// One list element: optional whitespace around one or more digits. Returns nil for a
    /// number beyond `Int.max`.
    private static func parseLength(_ element: Substring.UTF8View) throws(HTTPBodyError) -> Int? {
        var digits = element[...]
        while let first = digits.first, HTTPSyntax.isOWS(first) { digits = digits.dropFirst() }
        while let last = digits.last, HTTPSyntax.isOWS(last) { digits = digits.dropLast() }
        guard !digits.isEmpty else { throw .invalidContentLength }
        var value: Int? = 0
        for byte in digits {
            guard let digit = HTTPSyntax.digitValue(byte) else { throw .invalidContentLength }
            if let current = value {
                let (times10, overflow1) = current.multipliedReportingOverflow(by: 10)
                let (sum, overflow2) = times10.addingReportingOverflow(digit)
                value = overflow1 || overflow2 ? nil : sum
            }
        }
        return value
    }
}
