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

    init(backplane: (any TopicBackplane)? = nil) {
        self.backplane = backplane
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
        guard let subscribers = state.withLock({ $0.topics[topic] }),
              subscribers.count > (subscribers.contains(excluded) ? 1 : 0) else { return nil }
        if opcode == .text && (backplane == nil || fromBackplane) && !UTF8Validator.isValid(payload) { return nil }
        return Delivery(publication: TopicPublication(topic: topic, opcode: opcode, payload: payload, compress: compress),
                        groups: subscribers.loops)
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
