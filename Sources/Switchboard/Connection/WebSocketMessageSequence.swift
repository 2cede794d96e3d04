import SwitchboardCore

/// The messages of one connection, in order, as an `AsyncSequence` (see
/// ``WebSocketConnection/messages()``). Ends when the connection has closed and every received
/// message has been delivered.
///
/// Iterating from code isolated to the connection (a server route handler, whose `connection`
/// parameter is `isolated`) costs no executor hop per message: `next` runs on the connection's
/// loop and only suspends when no message is queued. Cancelling the iterating task ends the
/// sequence and closes the connection with 1001.
public struct WebSocketMessageSequence: AsyncSequence, Sendable {
    public typealias Element = WebSocketMessage
    public typealias Failure = Never

    let connection: WebSocketConnection

    public func makeAsyncIterator() -> Iterator { Iterator(connection: connection) }

    public struct Iterator: AsyncIteratorProtocol {
        let connection: WebSocketConnection

        public mutating func next(isolation actor: isolated (any Actor)?) async -> WebSocketMessage? {
            await connection.nextMessage()
        }

        public mutating func next() async -> WebSocketMessage? {
            await connection.nextMessage()
        }
    }
}
