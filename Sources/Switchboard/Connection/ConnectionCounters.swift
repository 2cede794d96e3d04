import Logging
import Synchronization
import SwitchboardCore

/// Lock-free counters shared by a server and its connections, the server's one hook for a
/// connection that closed, its logger and its metrics: one object per server (and one per
/// client adapter), so a connection keeps a single reference for all of them instead of a
/// closure, a logger and instruments of its own (idle memory per connection). A client
/// adapter's instance serves for its logger; its counters count, but nothing reads them.
final class ConnectionCounters: Sendable {
    /// What connections log through, with their `connection` id added as metadata at each call.
    let logger: Logger
    /// The swift-metrics instruments (nil without the `MetricsSupport` trait or for clients).
    let metrics: ServerMetrics?

    init(logger: Logger, metrics: ServerMetrics? = nil) {
        self.logger = logger
        self.metrics = metrics
    }

    /// Called once per connection, when it has closed, before `open` is decremented.
    typealias CloseHook = @Sendable (WebSocketConnection, WebSocketCloseStatus) -> Void
    /// The hook inside a struct: a bare closure read out through `withLock`'s `inout` gets wrapped
    /// in new reabstraction thunks on every read in optimized builds, so the stored closure grew
    /// with each closed connection until the stack overflowed (about 11,000 closes).
    private struct HookBox { let call: CloseHook }
    private let closeHook = Locked<HookBox?>(nil)
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
    let writeStallCloses = Atomic<Int>(0)

    /// A data message arrived with `bytes` of payload.
    func messageIn(bytes: Int) {
        messagesIn.wrappingAdd(1, ordering: .relaxed)
        bytesInTotal.wrappingAdd(bytes, ordering: .relaxed)
        metrics?.messageIn(bytes: bytes)
    }
    /// A data message was queued with `bytes` of payload.
    func messageOut(bytes: Int) {
        messagesOut.wrappingAdd(1, ordering: .relaxed)
        bytesOutTotal.wrappingAdd(bytes, ordering: .relaxed)
        metrics?.messageOut(bytes: bytes)
    }
    func slowConsumerClosed() {
        slowConsumers.wrappingAdd(1, ordering: .relaxed)
        metrics?.slowConsumerClosed()
    }
    /// A connection was aborted because its peer took no queued byte for the write-stall timeout.
    func writeStallClosed() {
        writeStallCloses.wrappingAdd(1, ordering: .relaxed)
        metrics?.writeStallClosed()
    }
    /// Reading stopped because a queue was above its high-water mark (a metric only).
    func backpressurePaused() { metrics?.backpressurePaused() }
    /// A keepalive ping was answered after `rtt`.
    func pingAnswered(after rtt: Duration) { metrics?.pingAnswered(after: rtt) }
    /// A socket or an upgrade request was refused.
    func recordRejection(_ reason: RejectionReason, status: Int?) {
        rejected.wrappingAdd(1, ordering: .relaxed)
        metrics?.rejected(reason, status: status)
    }
    /// Set once, by the server, before it accepts connections.
    func setCloseHook(_ hook: @escaping CloseHook) { closeHook.withLock { $0 = HookBox(call: hook) } }

    func connectionClosed(_ connection: WebSocketConnection, status: WebSocketCloseStatus) {
        closeHook.withLock { $0 }?.call(connection, status)
        open.wrappingSubtract(1, ordering: .relaxed)
        metrics?.connectionClosed(code: status.code)
        socketReleased()
    }
    func socketReleased() { sockets.wrappingSubtract(1, ordering: .relaxed) }
}
