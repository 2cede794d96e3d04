import SwitchboardCore

/// The server's one handler of plain HTTP requests: the synchronous head-only form
/// (``WebSocketServer/onHTTPRequest(_:)``) or the asynchronous one with the body
/// (``WebSocketServer/handleHTTP(_:)``).
enum HTTPHandler: Sendable {
    case head(@Sendable (HTTPRequestHead) -> HTTPResponse?)
    case request(@Sendable (HTTPRequest) async -> HTTPResponse?)
}
