/// The outcome of feeding one chunk to ``HTTPRequestParser`` or ``HTTPResponseParser``.
public enum HTTPParseResult<Head: Sendable & Equatable>: Sendable, Equatable {
    /// The head is not complete yet; the whole chunk was consumed and buffered.
    case needMoreData
    /// The head is complete. `consumed` is the number of bytes of the LAST chunk that belonged
    /// to the head; the caller keeps the remaining bytes (e.g. the first WebSocket frames).
    case complete(Head, consumed: Int)
}
