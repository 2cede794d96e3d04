/// A ``RedisClient``'s or ``RedisSubscriber``'s connection, as reported to its state handler.
public enum RedisConnectionState: Sendable, Equatable {
    /// Connected and authenticated. `reconnected` is true when an earlier connection of this
    /// client was lost: pub/sub messages published meanwhile were not received.
    case connected(reconnected: Bool)
    /// The connection was lost or could not be made; the client retries with backoff.
    case disconnected(RedisError)
}
