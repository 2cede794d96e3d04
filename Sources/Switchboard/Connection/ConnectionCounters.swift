import Synchronization
import SwitchboardCore

/// Lock-free counters shared by a server and its connections, and the server's one hook for a
/// connection that closed: one object per server, so a connection keeps a single reference
/// for both instead of a closure (and a logger) of its own.
final class ConnectionCounters: Sendable {
    /// Called once per connection, when it has closed, before `open` is decremented.
    typealias CloseHook = @Sendable (WebSocketConnection, WebSocketCloseStatus) -> Void
    private let closeHook = Locked<CloseHook?>(nil)
    let open = Atomic<Int>(0)
    /// Accepted sockets not yet closed (handshakes in progress included): what
    /// ``WebSocketServerConfiguration/maxConnections`` caps.
    let sockets = Atomic<Int>(0)
    let accepted = Atomic<Int>(0)
    let rejected = Atomic<Int>(0)
    let messagesIn = Atomic<Int>(0)
    let messagesOut = Atomic<Int>(0)
    let bytesInTotal = Atomic<Int>(0)
    let bytesOutTotal = Atomic<Int>(0)
    let slowConsumers = Atomic<Int>(0)

    /// A data message arrived with `bytes` of payload.
    func messageIn(bytes: Int) {
        messagesIn.wrappingAdd(1, ordering: .relaxed)
        bytesInTotal.wrappingAdd(bytes, ordering: .relaxed)
    }
    /// A data message was queued with `bytes` of payload.
    func messageOut(bytes: Int) {
        messagesOut.wrappingAdd(1, ordering: .relaxed)
        bytesOutTotal.wrappingAdd(bytes, ordering: .relaxed)
    }
    func slowConsumerClosed() { slowConsumers.wrappingAdd(1, ordering: .relaxed) }
    /// Set once, by the server, before it accepts connections.
    func setCloseHook(_ hook: @escaping CloseHook) { closeHook.withLock { $0 = hook } }

    func connectionClosed(_ connection: WebSocketConnection, status: WebSocketCloseStatus) {
        closeHook.withLock { $0 }?(connection, status)
        open.wrappingSubtract(1, ordering: .relaxed)
        socketReleased()
    }
    func socketReleased() { sockets.wrappingSubtract(1, ordering: .relaxed) }
}
