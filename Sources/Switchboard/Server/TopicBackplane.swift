import Logging
import Synchronization
import SwitchboardCore

/// Carries a server's topic publications to the other server processes, and theirs to it, so
/// that a topic spans every process that shares the backplane (`SwitchboardRedis` provides one
/// on Redis pub/sub: `RedisTopicBackplane`).
///
/// The server serves its own subscribers in-process as always; the backplane only moves
/// messages between processes, once per process and never once per subscriber. The server
/// tells it which topics have local subscribers (``topicActivated(_:)`` on the first,
/// ``topicDeactivated(_:)`` after the last), so a process receives only the topics it needs.
///
/// Set it in ``WebSocketServerConfiguration/backplane``. The server calls ``attach(_:)`` when it
/// starts and ``detach()`` when it has shut down.
public protocol TopicBackplane: AnyObject, Sendable {
    /// The server starts: messages from other processes go to `receiver`. Must not wait for
    /// the network (a backplane that cannot connect keeps trying; local delivery goes on).
    func attach(_ receiver: TopicBackplaneReceiver)
    /// `topic` has its first local subscriber: start receiving it from other processes.
    /// Called under the server's topic lock, in order: return at once, never call back into
    /// the server.
    func topicActivated(_ topic: String)
    /// `topic` has no local subscriber any more. Same rules as ``topicActivated(_:)``.
    func topicDeactivated(_ topic: String)
    /// A message published on this server (already served to its local subscribers): carry it
    /// to the other processes. Must not block; a backplane that cannot send queues a bounded
    /// amount and counts what it drops.
    func publish(_ message: WebSocketMessage, to topic: String, compress: Bool)
    /// Returns once messages of `topic` (activated) from other processes are being received:
    /// true, or false when the backplane is not connected now.
    func waitUntilReceiving(_ topic: String) async -> Bool
    /// The server has shut down: stop, and drop the receiver.
    func detach() async
}

/// Where a ``TopicBackplane`` hands what it receives: one server's topics.
public struct TopicBackplaneReceiver: Sendable {
    private let target: BackplaneTarget

    init(registry: TopicRegistry, logger: Logger) {
        target = BackplaneTarget(registry: registry, logger: logger)
    }

    /// Queues `message`, published on another process, on this server's subscribers of `topic`
    /// (not sent back to the backplane). Returns how many subscribers it was queued on or
    /// handed to; 0 once the server is gone.
    @discardableResult
    public func deliver(_ message: WebSocketMessage, to topic: String, compress: Bool = true) -> Int {
        target.registry?.publishNow(message, to: topic, excluding: nil, compress: compress, fromBackplane: true) ?? 0
    }

    /// Reports that messages of `topics` from other processes may have been lost (the
    /// backplane was disconnected, and its transport does not keep messages meanwhile): logged
    /// as a warning per topic and counted in ``WebSocketServer/Statistics/backplaneGaps``. With
    /// ``WebSocketServerConfiguration/topicReplay``, each topic's history starts a new epoch, so
    /// a subscriber resuming from before the gap is told that recovery failed.
    public func reportPossibleGap(in topics: [String]) {
        guard let registry = target.registry else { return }
        registry.restartHistories(topics)
        for topic in topics {
            registry.backplaneGaps.add(1, ordering: .relaxed)
            target.logger.warning("messages from other processes may have been lost while the backplane was disconnected",
                                  metadata: ["topic": "\(topic)"])
        }
    }
}

/// The receiver's server, held weakly (the server holds the backplane, which holds the receiver).
private final class BackplaneTarget: Sendable {
    weak let registry: TopicRegistry?
    let logger: Logger

    init(registry: TopicRegistry, logger: Logger) {
        self.registry = registry
        self.logger = logger
    }
}
