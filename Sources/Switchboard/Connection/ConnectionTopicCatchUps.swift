/// One connection's topics in catch-up (``TopicCatchUp``): the publications held for each, and
/// the filters applied after. Allocated on first use, so a connection that never catches up
/// pays one pointer. Confined to the connection's event loop.
///
/// A catch-up that begins while an earlier one's filter is still waiting (for a late
/// publication it must skip) keeps that filter: the filters form a chain, every publication
/// goes through each, one that any filter skips is not sent, and each filter leaves the chain
/// when it answers ``TopicCatchUpDecision/deliverAndStopFiltering``.
final class ConnectionTopicCatchUps {
    typealias Filter = @Sendable ([UInt8]) -> TopicCatchUpDecision

    /// The most filters kept per topic; beyond it the oldest is dropped. A filter normally
    /// stops at the first newer publication, so only a topic that stays silent keeps several.
    static let maximumFilters = 16

    struct Entry {
        /// Tells a finished or cancelled catch-up from a newer one of the same topic.
        var generation: UInt64
        var holding = true
        var held: [TopicPublication] = []
        var heldBytes = 0
        /// Oldest first: those of earlier catch-ups still filtering, then this one's.
        var filters: [Filter] = []

        /// Appends `filter` to the chain, dropping the oldest beyond ``maximumFilters``.
        mutating func add(_ filter: @escaping Filter) {
            filters.append(filter)
            let excess = filters.count - ConnectionTopicCatchUps.maximumFilters
            if excess > 0 { filters.removeFirst(excess) }
        }
    }

    var entries: [String: Entry] = [:]
    private var lastGeneration: UInt64 = 0

    /// Starts holding `topic`; returns the catch-up's generation. Begun while an earlier
    /// catch-up of the topic still holds, it takes over what that one held (sent by this one's
    /// finish, through every filter then in the chain: nothing dropped) and keeps the filters.
    func begin(_ topic: String) -> UInt64 {
        lastGeneration &+= 1
        var entry = entries[topic] ?? Entry(generation: lastGeneration)
        entry.generation = lastGeneration
        entry.holding = true
        entries[topic] = entry
        return lastGeneration
    }

    /// What to do with a publication of a topic: nil when the topic is not caught up.
    enum Step: Equatable { case held(overLimit: Bool), skip, deliver }

    /// Decides for `publication` (held, filtered, or as usual); `limit` bounds the held bytes.
    func step(for publication: TopicPublication, limit: Int) -> Step? {
        guard var entry = entries[publication.topic] else { return nil }
        if entry.holding {
            entry.held.append(publication)
            entry.heldBytes += publication.payload.count
            entries[publication.topic] = entry
            return .held(overLimit: entry.heldBytes > limit)
        }
        return passes(publication.topic, publication.payload) ? .deliver : .skip
    }

    /// Runs `payload` through `topic`'s filters (its catch-up no longer holding): whether it is
    /// sent. Every filter sees it; those that stop leave the chain, and the entry goes with the last.
    func passes(_ topic: String, _ payload: [UInt8]) -> Bool {
        guard var entry = entries[topic], !entry.holding else { return true }
        var deliver = true
        var kept: [Filter] = []
        kept.reserveCapacity(entry.filters.count)
        for filter in entry.filters {
            switch filter(payload) {
            case .skip:
                deliver = false
                kept.append(filter)
            case .deliver:
                kept.append(filter)
            case .deliverAndStopFiltering:
                break
            }
        }
        if kept.isEmpty {
            entries[topic] = nil
        } else {
            entry.filters = kept
            entries[topic] = entry
        }
        return deliver
    }

    /// Ends holding for the catch-up `generation` of `topic`: returns what was held and adds
    /// `filter` to the chain for it and later publications. The caller sends what was held
    /// through ``passes(_:_:)``, in order, with no suspension. A catch-up that a later one took
    /// over returns nil: what it held goes with the later one's finish; `filter` still joins
    /// the chain (so it sees those publications too while the later one holds).
    func release(_ topic: String, generation: UInt64, filter: Filter?) -> [TopicPublication]? {
        guard var entry = entries[topic], entry.generation == generation, entry.holding else {
            if let filter {
                var entry = entries[topic] ?? Entry(generation: generation, holding: false)
                entry.add(filter)
                entries[topic] = entry
            }
            return nil
        }
        let held = entry.held
        entry.held = []
        entry.heldBytes = 0
        entry.holding = false
        if let filter { entry.add(filter) }
        entries[topic] = entry.filters.isEmpty ? nil : entry
        return held
    }
}
