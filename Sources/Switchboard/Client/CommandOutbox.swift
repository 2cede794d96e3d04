/// Commands sent through a ``SocketAdapter`` on their way to its connection's event loop,
/// without an executor hop per command: callers append under a lock, and one job on the loop
/// frames everything appended before it ran. Bounded: past ``limit`` bytes waiting, or while
/// the connection's outbound queue is above its high-water mark, callers take the slow path
/// (the connection's own `send`, which waits for room).
///
/// Pure bookkeeping, guarded by the adapter's lock; the adapter does the I/O. Generic over the
/// connection only so that it is unit-testable without one.
struct CommandOutbox<Connection: AnyObject> {
    /// Most bytes of commands waiting for the loop.
    static var limit: Int { 256 << 10 }

    private var connection: Connection?
    private var pending: [String] = []
    private var pendingBytes = 0
    /// A job to drain `pending` is scheduled on the loop.
    private var scheduled = false
    /// Whether the connection's outbound queue was at or below its high-water mark when
    /// last seen.
    private var writable = true
    /// Commands whose drain job found the connection already closed: never handed to a
    /// connection, so the adapter sends them first on the next one (or reports them).
    private var stranded: [String] = []

    enum Offer {
        /// Appended; a drain job is already scheduled.
        case queued
        /// Appended; schedule a drain job on this connection's loop.
        case queuedAndWake(Connection)
        /// Not appended: no open connection, no room, or the connection's queue is full.
        case refused
    }

    mutating func offer(_ line: String) -> Offer {
        guard let connection, writable, pendingBytes < Self.limit else { return .refused }
        pending.append(line)
        pendingBytes += line.utf8.count
        if scheduled { return .queued }
        scheduled = true
        return .queuedAndWake(connection)
    }

    /// Everything appended so far, for the drain job.
    mutating func takeBatch() -> [String] {
        let batch = pending
        pending = []
        pendingBytes = 0
        scheduled = false
        return batch
    }

    /// After a drain, or after a slow-path send found room.
    mutating func drained(writable: Bool) {
        self.writable = writable
    }

    /// A drain job found its connection closed: `batch` was not sent. Kept, in order, for the
    /// adapter (``takeStranded()``).
    mutating func strand(_ batch: [String]) {
        stranded += batch
    }

    /// The commands stranded so far, oldest first; the adapter takes them once the jobs of the
    /// lost connection have run.
    mutating func takeStranded() -> [String] {
        defer { stranded = [] }
        return stranded
    }

    /// The adapter's connection changed (opened, lost, replaced).
    mutating func connectionChanged(to connection: Connection?) {
        self.connection = connection
        writable = true
    }
}
