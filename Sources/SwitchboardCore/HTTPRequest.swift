/// A plain HTTP request (one that is not a WebSocket upgrade) with its body, as handed to
/// `WebSocketServer.handleHTTP(_:)`.
///
/// The body is exactly the `Content-Length` bytes the client announced (empty when it announced
/// none, for methods that may omit it); see ``HTTPBodyFraming`` for the rules and
/// ``HTTPBodyReader`` for how it is collected.
public struct HTTPRequest: Sendable, Equatable {
    /// The request line and header fields.
    public var head: HTTPRequestHead
    /// The body bytes, as received (not decoded).
    public var body: [UInt8]

    /// Creates a request from a head and a body (nothing is validated).
    public init(head: HTTPRequestHead, body: [UInt8] = []) {
        self.head = head
        self.body = body
    }
}
