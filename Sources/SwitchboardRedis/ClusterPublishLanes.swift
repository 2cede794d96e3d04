/// The bookkeeping of Redis Cluster publishes (``RedisTopicBackplane`` with a cluster), as a pure
/// state machine: no I/O, no lock, no clock, so every rule is tested step by step
/// (`ClusterPublishLanesTests`). Its owner keeps it behind a lock and calls one method per
/// critical section.
///
/// One lane per slot, sent in order, one publish at a time, by one drainer per lane:
/// - ``admit(_:size:slot:)`` answers ``Admission/startLane`` when it opened the slot's lane: the
///   caller then starts the lane's only drainer, which sends ``head(of:)``;
/// - ``finishHead(of:)`` removes the publish just sent and, in the same step, returns the next
///   one, or gives the empty lane up and returns nil (the drainer then stops: a later publish to
///   the slot opens a new lane, with a new drainer, that the old one never sees). Finishing and
///   taking the next in two steps is what once let two drainers send the same publish.
///
/// Bounded as the standalone queue: at most `maximumCount` publishes and `maximumBytes` bytes,
/// queued and in flight together. When full, the longest lane gives up its newest publishes
/// (never its head, which is being sent) while it is longer than the admitted slot's lane would
/// be, so a shard that cannot be reached does not starve the others.
struct ClusterPublishLanes<Element> {
    /// What ``admit(_:size:slot:)`` did with a publish.
    enum Admission: Equatable {
        /// Appended behind the lane's other publishes; its drainer will send it.
        case queued
        /// The slot had no lane: this publish opened one, and the caller starts its drainer.
        case startLane
        /// Not admitted (full, or closed). `firstDrop` is true for the first drop since the
        /// queue last emptied (the owner logs that one only), false when closed.
        case dropped(firstDrop: Bool)
    }

    let maximumCount: Int
    let maximumBytes: Int
    /// Publishes queued or in flight.
    private(set) var count = 0
    /// Their bytes.
    private(set) var bytes = 0
    private(set) var isClosed = false
    private var lanes: [Int: [(element: Element, size: Int)]] = [:]
    private var droppedSinceEmpty = false

    init(maximumCount: Int, maximumBytes: Int) {
        self.maximumCount = maximumCount
        self.maximumBytes = maximumBytes
    }

    /// The number of lanes open (slots with a publish queued or in flight).
    var laneCount: Int { lanes.count }

    /// Admits a publish of `size` bytes for `slot`, evicting other lanes' newest publishes when
    /// full; `evicted` is how many it evicted (dropped, for the owner's counters).
    mutating func admit(_ element: Element, size: Int, slot: Int) -> (admission: Admission, evicted: Int) {
        guard !isClosed else { return (.dropped(firstDrop: false), 0) }
        var evicted = 0
        let own = lanes[slot]?.count ?? 0
        while count >= maximumCount || bytes + size > maximumBytes,
              let longest = lanes.max(by: { $0.value.count < $1.value.count }),
              longest.key != slot, longest.value.count >= 2, longest.value.count > own + 1,
              let dropped = lanes[longest.key]?.popLast() {
            count -= 1
            bytes -= dropped.size
            evicted += 1
        }
        guard count < maximumCount, bytes + size <= maximumBytes else {
            defer { droppedSinceEmpty = true }
            return (.dropped(firstDrop: !droppedSinceEmpty), evicted)
        }
        count += 1
        bytes += size
        if lanes[slot] != nil {
            lanes[slot]?.append((element, size))
            return (.queued, evicted)
        }
        lanes[slot] = [(element, size)]
        return (.startLane, evicted)
    }

    /// The publishes of `slot`'s lane, its head first (for tests and diagnostics).
    func elements(of slot: Int) -> [Element] {
        lanes[slot]?.map(\.element) ?? []
    }

    /// The publish a lane's drainer sends next: the lane's head (nil when closed or no lane).
    func head(of slot: Int) -> Element? {
        isClosed ? nil : lanes[slot]?.first?.element
    }

    /// The drainer of `slot` sent (or gave up on) the lane's head: removes it and returns the
    /// next publish, or gives the empty lane up and returns nil. Nil as well when closed.
    mutating func finishHead(of slot: Int) -> Element? {
        guard !isClosed, lanes[slot]?.isEmpty == false, let finished = lanes[slot]?.removeFirst() else { return nil }
        count -= 1
        bytes -= finished.size
        if count == 0 { droppedSinceEmpty = false }
        guard let following = lanes[slot]?.first else {
            lanes[slot] = nil
            return nil
        }
        return following.element
    }

    /// Stops: everything queued is forgotten, every later publish dropped, every drainer stops
    /// at its next step.
    mutating func close() {
        isClosed = true
        lanes = [:]
        count = 0
        bytes = 0
    }
}

extension ClusterPublishLanes: Sendable where Element: Sendable {}
