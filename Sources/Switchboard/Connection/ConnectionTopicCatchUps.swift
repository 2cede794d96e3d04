/// One connection's topics in catch-up (``TopicCatchUp``): the publications held for each, and
/// the filter applied after. Allocated on first use, so a connection that never catches up
/// pays one pointer. Confined to the connection's event loop.
final class ConnectionTopicCatchUps {
    struct Entry {
        /// Tells a finished or cancelled catch-up from a newer one of the same topic.
        var generation: UInt64
        var holding = true
        var held: [TopicPublication] = []
        var heldBytes = 0
        var filter: (@Sendable ([UInt8]) -> TopicCatchUpDecision)?
    }

    var entries: [String: Entry] = [:]
    private var lastGeneration: UInt64 = 0

    /// Starts (or restarts) holding `topic`; returns the catch-up's generation.
    func begin(_ topic: String) -> UInt64 {
        lastGeneration &+= 1
        entries[topic] = Entry(generation: lastGeneration)
        return lastGeneration
    }

    /// What to do with a publication of a topic: nil when the topic is not caught up.
    enum Step { case held(overLimit: Bool), skip, deliver }

    /// Decides for `publication` (held, filtered, or as usual); `limit` bounds the held bytes.
    func step(for publication: TopicPublication, limit: Int) -> Step? {
        guard var entry = entries[publication.topic] else { return nil }
        if entry.holding {
            entry.held.append(publication)
            entry.heldBytes += publication.payload.count
            entries[publication.topic] = entry
            return .held(overLimit: entry.heldBytes > limit)
        }
        guard let filter = entry.filter else {
            entries[publication.topic] = nil
            return .deliver
        }
        switch filter(publication.payload) {
        case .skip: return .skip
        case .deliver: return .deliver
        case .deliverAndStopFiltering:
            entries[publication.topic] = nil
            return .deliver
        }
    }

    /// Ends holding for the catch-up `generation` of `topic`: returns what was held (nil if that
    /// catch-up is no longer current) and keeps `filter` for later publications.
    func release(_ topic: String, generation: UInt64,
                 filter: (@Sendable ([UInt8]) -> TopicCatchUpDecision)?) -> [TopicPublication]? {
        guard var entry = entries[topic], entry.generation == generation, entry.holding else { return nil }
        let held = entry.held
        entry.held = []
        entry.heldBytes = 0
        entry.holding = false
        entry.filter = filter
        entries[topic] = filter == nil ? nil : entry
        return held
    }
}
