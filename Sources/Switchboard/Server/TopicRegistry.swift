import Synchronization
import SwitchboardCore

/// Publish/subscribe: named topics of connections.
///
/// Publishing never waits on a subscriber: each message is queued on every subscriber's own
/// bounded outbound buffer. A subscriber whose buffer is above its high-water mark (it stopped
/// reading) is closed with 1013 "try again later" and counted in
/// ``WebSocketServer/Statistics/slowConsumersClosed``: no other subscriber is delayed, memory
/// stays bounded, and nothing is dropped silently.
///
/// Cost of a publish: the frame is serialized (and text validated) once, since server frames
/// are unmasked and identical for every subscriber. Subscribers are kept grouped by event loop,
/// so a publish costs one append per subscriber and no per-subscriber task, array or actor hop:
/// the publisher's own loop is served inline, and each other loop gets one job (a task group
/// with one child per loop). Every socket is then written once per loop iteration, so messages
/// published in the same iteration reach a subscriber in one write.
///
/// With a ``TopicBackplane``, each publish is also handed to it (once), the backplane hears
/// which topics have local subscribers, and messages from other processes are delivered here
/// like local publishes (``publishNow(_:to:excluding:compress:fromBackplane:)``).
final class TopicRegistry: Sendable {
    let backplane: (any TopicBackplane)?
    /// Possible gaps reported by the backplane (one per topic per reconnection).
    let backplaneGaps = Atomic<Int>(0)
    /// Numbered, bounded history per topic; nil: topics keep no history.
    let replay: TopicReplayConfiguration?
    /// Subscriptions resumed with every missed message / that could not be.
    let resumesRecovered = Atomic<Int>(0)
    let resumesFailed = Atomic<Int>(0)

    init(backplane: (any TopicBackplane)? = nil, replay: TopicReplayConfiguration? = nil) {
        self.backplane = backplane
        self.replay = replay
    }

    /// One topic's subscribers on one loop. `connections` is copied out by reference (copy on
    /// write) when publishing, so a publish never copies the subscriber list.
    private struct LoopSubscribers {
        let loop: EventLoop
        var connections: [WebSocketConnection] = []
        /// Index of each subscriber in `connections` (removal swaps the last one in).
        var positions: [ObjectIdentifier: Int] = [:]

        init(loop: EventLoop) { self.loop = loop }

        func contains(_ c: WebSocketConnection?) -> Bool {
            c.map { positions[ObjectIdentifier($0)] != nil } ?? false
        }

        mutating func insert(_ c: WebSocketConnection) -> Bool {
            let id = ObjectIdentifier(c)
            guard positions[id] == nil else { return false }
            positions[id] = connections.count
            connections.append(c)
            return true
        }

        mutating func remove(_ c: WebSocketConnection) {
            guard let i = positions.removeValue(forKey: ObjectIdentifier(c)) else { return }
            let last = connections.removeLast()
            if i < connections.count {
                connections[i] = last
                positions[ObjectIdentifier(last)] = i
            }
        }
    }

    private struct Topic {
        var loops: [LoopSubscribers] = []
        var count: Int { loops.reduce(0) { $0 + $1.connections.count } }

        func contains(_ c: WebSocketConnection?) -> Bool { loops.contains { $0.contains(c) } }

        mutating func insert(_ c: WebSocketConnection) -> Bool {
            if let i = loops.firstIndex(where: { $0.loop === c.loop }) { return loops[i].insert(c) }
            var group = LoopSubscribers(loop: c.loop)
            _ = group.insert(c)
            loops.append(group)
            return true
        }

        mutating func remove(_ c: WebSocketConnection) {
            guard let i = loops.firstIndex(where: { $0.loop === c.loop }) else { return }
            loops[i].remove(c)
            if loops[i].connections.isEmpty { loops.remove(at: i) }
        }
    }

    private struct State {
        var topics: [String: Topic] = [:]
        var byConnection: [ObjectIdentifier: Set<String>] = [:]
        /// Topic histories (with ``TopicReplayConfiguration``): created by a topic's first
        /// publish or resumable subscription, forgotten once the topic has no subscriber and
        /// every message has aged out.
        var logs: [String: TopicReplayLog<TopicPublication>] = [:]
        var sweeping = false
    }
    private let state = Locked(State())

    /// Returns true if newly subscribed.
    func subscribe(_ connection: WebSocketConnection, to topic: String) -> Bool {
        let id = ObjectIdentifier(connection)
        return state.withLock { s in
            let isNew = s.topics[topic] == nil
            guard s.topics[topic, default: Topic()].insert(connection) else { return false }
            s.byConnection[id, default: []].insert(topic)
            // Under the lock: activations and deactivations reach the backplane in order.
            if isNew { backplane?.topicActivated(topic) }
            return true
        }
    }

    func unsubscribe(_ connection: WebSocketConnection, from topic: String) {
        let id = ObjectIdentifier(connection)
        state.withLock { s in
            remove(connection, from: topic, in: &s)
            s.byConnection[id]?.remove(topic)
            if s.byConnection[id]?.isEmpty == true { s.byConnection[id] = nil }
        }
    }

    func unsubscribeAll(_ connection: WebSocketConnection) {
        let id = ObjectIdentifier(connection)
        state.withLock { s in
            guard let topics = s.byConnection.removeValue(forKey: id) else { return }
            for t in topics { remove(connection, from: t, in: &s) }
        }
    }

    private func remove(_ connection: WebSocketConnection, from topic: String, in s: inout State) {
        s.topics[topic]?.remove(connection)
        if s.topics[topic]?.loops.isEmpty == true {
            s.topics[topic] = nil
            backplane?.topicDeactivated(topic)
        }
    }

    func subscriberCount(_ topic: String) -> Int {
        state.withLock { $0.topics[topic]?.count ?? 0 }
    }

    /// A publish ready to deliver: the message (its frame serialized once) and the subscribers
    /// per loop.
    private struct Delivery {
        let publication: TopicPublication
        let groups: [LoopSubscribers]
    }

    /// Nil when there is nobody to deliver to, or when a text message is not valid UTF-8.
    /// A valid message goes to the backplane too (unless it came from there), whoever the
    /// local subscribers.
    private func prepare(_ message: WebSocketMessage, to topic: String, excluding excluded: WebSocketConnection?,
                         compress: Bool, fromBackplane: Bool = false) -> Delivery? {
        let (opcode, payload): (WebSocketOpcode, [UInt8]) = switch message {
        case .text(let b): (.text, b)
        case .binary(let b): (.binary, b)
        }
        if let backplane, !fromBackplane {
            if opcode == .text && !UTF8Validator.isValid(payload) { return nil }
            backplane.publish(message, to: topic, compress: compress)
        }
        if let replay {
            if opcode == .text && (backplane == nil || fromBackplane) && !UTF8Validator.isValid(payload) { return nil }
            return prepareNumbered(message, to: topic, excluding: excluded, compress: compress, replay: replay)
        }
        guard let subscribers = state.withLock({ $0.topics[topic] }),
              subscribers.count > (subscribers.contains(excluded) ? 1 : 0) else { return nil }
        if opcode == .text && (backplane == nil || fromBackplane) && !UTF8Validator.isValid(payload) { return nil }
        return Delivery(publication: TopicPublication(topic: topic, opcode: opcode, payload: payload, compress: compress),
                        groups: subscribers.loops)
    }

    /// With a history: numbers the message, stamps it (``TopicReplayConfiguration/stamp``), keeps
    /// it, and takes the subscribers, in one step under the lock, so that a subscription resuming
    /// at the same time gets it either from the history or live, never both and never neither.
    private func prepareNumbered(_ message: WebSocketMessage, to topic: String, excluding excluded: WebSocketConnection?,
                                 compress: Bool, replay: TopicReplayConfiguration) -> Delivery? {
        let now = ContinuousClock.now
        let (publication, subscribers, startSweep) = state.withLock { s -> (TopicPublication?, Topic?, Bool) in
            var log = s.logs.removeValue(forKey: topic) ?? TopicReplayLog(epoch: Self.newEpoch(), limits: replay.limits)
            let position = TopicPosition(epoch: log.epoch, sequence: log.lastSequence + 1)
            let stamped = replay.stamp.map { $0(position, message) } ?? message
            let (opcode, payload): (WebSocketOpcode, [UInt8]) = switch stamped {
            case .text(let b): (.text, b)
            case .binary(let b): (.binary, b)
            }
            if replay.stamp != nil && opcode == .text && !UTF8Validator.isValid(payload) {
                s.logs[topic] = log
                return (nil, nil, false)
            }
            let publication = TopicPublication(topic: topic, opcode: opcode, payload: payload, compress: compress)
            log.append(publication, bytes: payload.count, now: now)
            s.logs[topic] = log
            let startSweep = !s.sweeping
            s.sweeping = true
            return (publication, s.topics[topic], startSweep)
        }
        if startSweep { startSweeping(every: replay.maxAge) }
        guard let publication, let subscribers,
              subscribers.count > (subscribers.contains(excluded) ? 1 : 0) else { return nil }
        return Delivery(publication: publication, groups: subscribers.loops)
    }

    /// A fresh epoch token: 64 random bits, hex.
    private static func newEpoch() -> String {
        var rng = SecureRandom()
        let value = rng.next()
        let hex = String(value, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// Subscribes `connection` to `topic` and, in the same step, takes what it missed after
    /// `position` from the topic's history. Nil when it was subscribed already.
    func subscribeResuming(_ connection: WebSocketConnection, to topic: String, after position: TopicPosition?,
                           replay: TopicReplayConfiguration) -> (TopicSubscription, [TopicPublication])? {
        let id = ObjectIdentifier(connection)
        let now = ContinuousClock.now
        let result = state.withLock { s -> (TopicSubscription, [TopicPublication], Bool)? in
            let isNew = s.topics[topic] == nil
            guard s.topics[topic, default: Topic()].insert(connection) else { return nil }
            s.byConnection[id, default: []].insert(topic)
            if isNew { backplane?.topicActivated(topic) }
            var log = s.logs.removeValue(forKey: topic) ?? TopicReplayLog(epoch: Self.newEpoch(), limits: replay.limits)
            log.expire(now: now)
            let outcome: TopicSubscription.Outcome
            var missed: [TopicPublication] = []
            if let position {
                switch log.replay(after: position, now: now) {
                case .recovered(let publications):
                    missed = publications
                    outcome = .recovered(count: publications.count)
                case .failed(let reason):
                    outcome = .failed(reason)
                }
            } else {
                outcome = .new
            }
            let subscription = TopicSubscription(topic: topic, position: log.position, outcome: outcome)
            s.logs[topic] = log
            let startSweep = !s.sweeping
            s.sweeping = true
            return (subscription, missed, startSweep)
        }
        guard let (subscription, missed, startSweep) = result else { return nil }
        if startSweep { startSweeping(every: replay.maxAge) }
        switch subscription.outcome {
        case .recovered: resumesRecovered.add(1, ordering: .relaxed)
        case .failed: resumesFailed.add(1, ordering: .relaxed)
        case .new: break
        }
        return (subscription, missed)
    }

    /// The position after the newest message of `topic` (nil: no history kept for it now).
    func position(of topic: String) -> TopicPosition? {
        state.withLock { $0.logs[topic]?.position }
    }

    /// The backplane may have lost messages of `topics`: their histories start a new epoch, so
    /// no subscriber resumes across the gap as if nothing were missing.
    func restartHistories(_ topics: [String]) {
        state.withLock { s in
            for topic in topics where s.logs[topic] != nil {
                s.logs[topic]?.restart(epoch: Self.newEpoch())
            }
        }
    }

    /// Drops aged-out messages, and forgets topics with no subscriber and no message left, every
    /// `interval` while any history remains. Returns once none does.
    private func startSweeping(every interval: Duration) {
        let period = max(interval, .seconds(1))
        Task.detached { [weak self] in
            while true {
                try? await Task.sleep(for: period)
                guard let self, self.sweep() else { return }
            }
        }
    }

    /// One sweep; false when no history is left (and the sweeper stops).
    func sweep() -> Bool {
        let now = ContinuousClock.now
        return state.withLock { s in
            for topic in Array(s.logs.keys) {
                s.logs[topic]?.expire(now: now)
                if s.logs[topic]?.isEmpty == true && s.topics[topic] == nil { s.logs[topic] = nil }
            }
            s.sweeping = !s.logs.isEmpty
            return s.sweeping
        }
    }

    /// Topics with a history now, and the payload bytes they keep.
    func historyUsage() -> (topics: Int, messages: Int, bytes: Int) {
        state.withLock { s in
            s.logs.values.reduce((s.logs.count, 0, 0)) { ($0.0, $0.1 + $1.count, $0.2 + $1.bytes) }
        }
    }

    /// Queues `message` on every subscriber (except `excluded`); returns how many it was queued on.
    /// Subscribers on the caller's loop are served inline; each other loop gets one job, awaited.
    ///
    /// A text message that is not valid UTF-8 is queued nowhere (0).
    nonisolated(nonsending)
    func publish(_ message: WebSocketMessage, to topic: String, excluding excluded: WebSocketConnection?,
                 compress: Bool = true) async -> Int {
        guard let d = prepare(message, to: topic, excluding: excluded, compress: compress) else { return 0 }
        var sent = 0
        var remote: [LoopSubscribers] = []
        for group in d.groups {
            if group.loop.inEventLoop {
                sent += Self.deliver(d.publication, to: group.connections, excluding: excluded)
            } else {
                remote.append(group)
            }
        }
        guard !remote.isEmpty else { return sent }
        // One job per other loop, never one per subscriber.
        return await withTaskGroup(of: Int.self, returning: Int.self) { taskGroup in
            for group in remote {
                let connections = group.connections
                taskGroup.addTask(executorPreference: group.loop) {
                    Self.deliver(d.publication, to: connections, excluding: excluded)
                }
            }
            for await n in taskGroup { sent += n }
            return sent
        }
    }

    /// Like ``publish(_:to:excluding:compress:)`` without waiting, for synchronous code (callback
    /// routes): subscribers on the caller's loop get the frame queued before this returns;
    /// each other loop gets one job that queues it there shortly after. Returns how many
    /// subscribers it was queued on here plus how many it was handed to on other loops.
    /// `fromBackplane`: the message came from another process (not handed back to the backplane).
    func publishNow(_ message: WebSocketMessage, to topic: String, excluding excluded: WebSocketConnection?,
                    compress: Bool = true, fromBackplane: Bool = false) -> Int {
        guard let d = prepare(message, to: topic, excluding: excluded, compress: compress,
                              fromBackplane: fromBackplane) else { return 0 }
        var count = 0
        for group in d.groups {
            if group.loop.inEventLoop {
                count += Self.deliver(d.publication, to: group.connections, excluding: excluded)
            } else {
                let connections = group.connections
                count += connections.count - (group.contains(excluded) ? 1 : 0)
                group.loop.execute {
                    _ = Self.deliver(d.publication, to: connections, excluding: excluded)
                }
            }
        }
        return count
    }

    /// Queues the publication on each connection's outbound queue. Runs on the connections' loop.
    private static func deliver(_ publication: TopicPublication, to connections: [WebSocketConnection],
                                excluding excluded: WebSocketConnection?) -> Int {
        var sent = 0
        for c in connections where c !== excluded {
            if c.assumeIsolated({ $0.trySend(publication) }) { sent += 1 }
        }
        return sent
    }
}

/// One topic publish, shared by the loops that deliver it: the message, its plain frame
/// (serialized once), and its compressed frames, each made once per set of shared-compressor
/// parameters by the first subscriber's loop that needs it (RFC 7692 without context
/// takeover: the compressed bytes are the same for every subscriber with those parameters).
final class TopicPublication: Sendable {
    /// The topic it was published to (a subscriber in catch-up holds its topic's publications).
    let topic: String
    let opcode: WebSocketOpcode
    let payload: [UInt8]
    let frame: [UInt8]
    /// The publisher's per-message choice (false: never compressed).
    let compress: Bool
    private let compressed = Mutex<[PerMessageDeflateSharedStreams.CompressorKey: [UInt8]]>([:])

    init(topic: String, opcode: WebSocketOpcode, payload: [UInt8], compress: Bool) {
        self.topic = topic
        self.opcode = opcode
        self.payload = payload
        self.compress = compress
        frame = WebSocketFrameSerializer.frame(opcode: opcode, payload: payload, maskingKey: nil)
    }

    /// The compressed frame for subscribers compressing with `key`, made with `streams` (the
    /// calling loop's) on first request; nil if zlib failed.
    func compressedFrame(for key: PerMessageDeflateSharedStreams.CompressorKey,
                         streams: PerMessageDeflateSharedStreams) -> [UInt8]? {
        compressed.withLock { cache in
            if let frame = cache[key] { return frame }
            guard let body = payload.withUnsafeBytes({ streams.compress($0, key: key) }) else { return nil }
            let frame = WebSocketFrameSerializer.frame(opcode: opcode, rsv: 0b100, payload: body, maskingKey: nil)
            cache[key] = frame
            return frame
        }
    }
}
