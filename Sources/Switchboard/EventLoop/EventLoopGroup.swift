import Foundation
import Synchronization

/// A fixed set of ``EventLoop``s, one per core by default; connections are spread across them.
public final class EventLoopGroup: Sendable {
    /// The loops of this group.
    public let loops: [EventLoop]
    private let nextIndex = Atomic<Int>(0)

    /// The backend every loop of the group uses (``EventLoopBackend/epoll`` or
    /// ``EventLoopBackend/ioUring``: ``EventLoopBackend/automatic`` resolved).
    public let backend: EventLoopBackend

    /// Starts `count` loop threads (at least one) waiting with `backend`. Throws if the
    /// backend cannot run here (io_uring refused by the kernel or a seccomp profile), or for an
    /// unknown `SWITCHBOARD_EVENT_LOOP` value with ``EventLoopBackend/automatic``.
    public init(loopCount count: Int = ProcessInfo.processInfo.activeProcessorCount, name: String = "switchboard",
                backend: EventLoopBackend = .automatic) throws(SocketError) {
        let resolved = try backend.resolved()
        var loops: [EventLoop] = []
        for i in 0..<max(1, count) {
            do {
                loops.append(try EventLoop(name: "\(name)-\(i)", backend: resolved))
            } catch {
                for l in loops { l.shutdown() }
                throw error
            }
        }
        self.loops = loops
        self.backend = resolved
    }

    /// The process-wide group used when none is given: one loop per active core, started on first use.
    public static var shared: EventLoopGroup {
        get throws(SocketError) {
            try sharedStorage.withLock { stored throws(SocketError) -> EventLoopGroup in
                if let g = stored { return g }
                let g = try EventLoopGroup()
                stored = g
                return g
            }
        }
    }
    private static let sharedStorage = Locked<EventLoopGroup?>(nil)

    /// Stops every loop thread (after their queued work). Do not use the group afterwards.
    public func shutdown() {
        for l in loops { l.shutdown() }
    }

    /// Round-robin choice of a loop.
    public func next() -> EventLoop {
        let i = nextIndex.wrappingAdd(1, ordering: .relaxed).oldValue
        return loops[Int(UInt(bitPattern: i) % UInt(loops.count))]
    }
}
