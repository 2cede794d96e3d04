import SwitchboardCore

/// The state a ``WebSocketConnection`` needs only once it is closing, or once someone waits for
/// its close: allocated on first use, so an open, idle connection does not carry it (idle memory
/// per connection is the product's scale limit). Loop-confined, like the connection's state.
final class ConnectionClosingState {
    /// See ``WebSocketConnection/closeStatus``.
    var closeStatus: WebSocketCloseStatus?
    /// See ``WebSocketConnection/error``.
    var error: SwitchboardError?
    /// The one closing timer (see ``WebSocketConnection/closeTimer``).
    var closeTimer: EventLoopTimer?
    /// Tasks waiting in ``WebSocketConnection/waitUntilClosed()``.
    var closeWaiters: [CheckedContinuation<Void, Never>] = []
    /// Internal observers of the close (the client adapter's reconnect logic).
    var closeHandlers: [@Sendable (WebSocketCloseStatus) -> Void] = []
}
