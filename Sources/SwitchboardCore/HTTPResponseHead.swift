/// The head of an HTTP/1.x response: status line and header fields (RFC 9112 §4).
public struct HTTPResponseHead: Sendable, Equatable {
    /// The protocol version, e.g. `HTTP/1.1`.
    public var version: String
    /// The three-digit status code (100–999 as parsed).
    public var status: Int
    /// The reason phrase; may be empty and carries no meaning (RFC 9112 §4).
    public var reason: String
    /// The header fields, in order.
    public var headers: HTTPHeaders

    /// Creates a response head from its parts, as given (nothing is validated).
    public init(version: String = "HTTP/1.1", status: Int, reason: String = "", headers: HTTPHeaders = HTTPHeaders()) {
        self.version = version
        self.status = status
        self.reason = reason
        self.headers = headers
    }
}
