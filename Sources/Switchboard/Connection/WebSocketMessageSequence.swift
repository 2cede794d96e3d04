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
    /// One whole message, text or binary.
    public typealias Element = WebSocketMessage
    /// Iteration never throws: the sequence just ends when the connection has closed.
    public typealias Failure = Never

    let connection: WebSocketConnection

    /// Creates the iterator. Iterate from one task at a time: a second task waiting on the same
    /// connection meanwhile sees its sequence end (nil).
    public func makeAsyncIterator() -> Iterator { Iterator(connection: connection) }

    /// The iterator of ``WebSocketMessageSequence``: each `next` takes the connection's next
    /// received message, waiting for one if none is queued.
    public struct Iterator: AsyncIteratorProtocol {
        let connection: WebSocketConnection

        /// The next message, or nil once the connection has closed and every message was
        /// delivered; cancelling the waiting task ends the sequence and closes with 1001.
        public mutating func next(isolation actor: isolated (any Actor)?) async -> WebSocketMessage? {
            // A server route handler iterating in its own task, isolated to the connection: the
            // steps of WebSocketConnection.nextMessage() without executor switches on the way in
            // and out, and without a cancellation handler, which that task does not need
            // (WebSocketConnection.beginHandlerTask()). Written here rather than called, so that
            // the suspended task keeps one frame less (idle memory per connection).
            guard let actor, actor === connection, WebSocketConnection.isHandlerTaskEntry(connection, ()) else {
                return await connection.nextMessage()
            }
            switch WebSocketConnection.prepareToReceiveEntry(connection, ()) {
            case .message(let m): return m
            case .end, .concurrent: break
            case .wait:
                let connection = self.connection
                if let m = await withUnsafeContinuation(isolation: actor, { (c: UnsafeContinuation<WebSocketMessage?, Never>) in
                    WebSocketConnection.handlerWaitEntry(connection, c)
                }) { return m }
            }
            WebSocketConnection.receiveEndEntry(connection, ())
            return nil
        }

        /// The next message, or nil once the connection has closed and every message was
        /// delivered; cancelling the waiting task ends the sequence and closes with 1001.
        public mutating func next() async -> WebSocketMessage? {
            await connection.nextMessage()
        }
    }
}
