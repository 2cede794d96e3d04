import Foundation
import Synchronization

/// A fixed set of ``EventLoop``s, one per core by default; connections are spread across them.
public final class EventLoopGroup: Sendable {
    /// The loops of this group.
    public let loops: [EventLoop]
    private let nextIndex = Atomic<Int>(0)

    /// Starts `count` loop threads (at least one).
    public init(loopCount count: Int = ProcessInfo.processInfo.activeProcessorCount, name: String = "switchboard") throws(SocketError) {
        var loops: [EventLoop] = []
        for i in 0..<max(1, count) {
            loops.append(try EventLoop(name: "\(name)-\(i)"))
        }
        self.loops = loops
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
