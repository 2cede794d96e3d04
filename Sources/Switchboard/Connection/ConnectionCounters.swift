import Synchronization

/// Lock-free counters shared by a server and its connections.
final class ConnectionCounters: Sendable {
    let open = Atomic<Int>(0)
    let accepted = Atomic<Int>(0)
    let rejected = Atomic<Int>(0)
    let messagesIn = Atomic<Int>(0)
    let messagesOut = Atomic<Int>(0)
    let bytesInTotal = Atomic<Int>(0)
    let bytesOutTotal = Atomic<Int>(0)
    let slowConsumers = Atomic<Int>(0)

    func bytesIn(_ n: Int) { bytesInTotal.wrappingAdd(n, ordering: .relaxed) }
    func messageIn() { messagesIn.wrappingAdd(1, ordering: .relaxed) }
    func messageOut(bytes: Int) {
        messagesOut.wrappingAdd(1, ordering: .relaxed)
        bytesOutTotal.wrappingAdd(bytes, ordering: .relaxed)
    }
    func slowConsumerClosed() { slowConsumers.wrappingAdd(1, ordering: .relaxed) }
    func connectionClosed() { open.wrappingSubtract(1, ordering: .relaxed) }
}
