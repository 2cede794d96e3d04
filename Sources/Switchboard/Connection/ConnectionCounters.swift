import Synchronization

/// Lock-free counters shared by a server and its connections.
final class ConnectionCounters: Sendable {
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
    func connectionClosed() {
        open.wrappingSubtract(1, ordering: .relaxed)
        socketReleased()
    }
    func socketReleased() { sockets.wrappingSubtract(1, ordering: .relaxed) }
}
