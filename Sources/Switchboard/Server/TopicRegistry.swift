import Synchronization
import SwitchboardCore

/// Publish/subscribe: named topics of connections.
///
/// Publishing never waits on a subscriber: each message is queued on every subscriber's own
/// bounded outbound buffer. A subscriber whose buffer is above its high-water mark (it stopped
/// reading) is closed with 1013 "try again later" and counted in
/// ``WebSocketServer/Statistics/slowConsumersClosed``: no other subscriber is delayed, memory
/// stays bounded, and nothing is dropped silently.
final class TopicRegistry: Sendable {
    private struct State {
        var topics: [String: [ObjectIdentifier: WebSocketConnection]] = [:]
        var byConnection: [ObjectIdentifier: Set<String>] = [:]
    }
    private let state = Locked(State())

    /// Returns true if newly subscribed.
    func subscribe(_ connection: WebSocketConnection, to topic: String) -> Bool {
        let id = ObjectIdentifier(connection)
        return state.withLock { s in
            if s.topics[topic, default: [:]].updateValue(connection, forKey: id) != nil { return false }
            s.byConnection[id, default: []].insert(topic)
            return true
        }
    }

    func unsubscribe(_ connection: WebSocketConnection, from topic: String) {
        let id = ObjectIdentifier(connection)
        state.withLock { s in
            s.topics[topic]?.removeValue(forKey: id)
            if s.topics[topic]?.isEmpty == true { s.topics[topic] = nil }
            s.byConnection[id]?.remove(topic)
            if s.byConnection[id]?.isEmpty == true { s.byConnection[id] = nil }
        }
    }

    func unsubscribeAll(_ connection: WebSocketConnection) {
        let id = ObjectIdentifier(connection)
        state.withLock { s in
            guard let topics = s.byConnection.removeValue(forKey: id) else { return }
            for t in topics {
                s.topics[t]?.removeValue(forKey: id)
                if s.topics[t]?.isEmpty == true { s.topics[t] = nil }
            }
        }
    }

    func subscriberCount(_ topic: String) -> Int {
        state.withLock { $0.topics[topic]?.count ?? 0 }
    }

    func subscribers(_ topic: String) -> [WebSocketConnection] {
        state.withLock { s in s.topics[topic].map { Array($0.values) } ?? [] }
    }

    /// Queues `message` on every subscriber (except `excluded`); returns how many it was queued on.
    ///
    /// The frame is serialized (and text validated) once per publish: server frames are
    /// unmasked, so every subscriber gets the same bytes. A text message that is not valid
    /// UTF-8 is queued nowhere (0).
    func publish(_ message: WebSocketMessage, to topic: String, excluding excluded: WebSocketConnection?) async -> Int {
        let targets = subscribers(topic).filter { $0 !== excluded }
        guard !targets.isEmpty else { return 0 }
        let (opcode, payload): (WebSocketOpcode, [UInt8]) = switch message {
        case .text(let b): (.text, b)
        case .binary(let b): (.binary, b)
        }
        if opcode == .text && !UTF8Validator.isValid(payload) { return 0 }
        let frame = WebSocketFrameSerializer.frame(opcode: opcode, payload: payload, maskingKey: nil)
        let payloadCount = payload.count
        // Group by loop: one hop per loop, not per subscriber.
        var byLoop: [ObjectIdentifier: (EventLoop, [WebSocketConnection])] = [:]
        for c in targets {
            byLoop[ObjectIdentifier(c.loop), default: (c.loop, [])].1.append(c)
        }
        let counter = Atomic<Int>(0)
        await withTaskGroup(of: Int.self) { group in
            for (_, entry) in byLoop {
                let (loop, conns) = entry
                group.addTask(executorPreference: loop) {
                    var sent = 0
                    frame.withUnsafeBytes { buf in
                        // Safety: used synchronously on this loop thread only.
                        nonisolated(unsafe) let buf = buf
                        for c in conns where c.assumeIsolated({ $0.trySend(frame: buf, payloadCount: payloadCount) }) {
                            sent += 1
                        }
                    }
                    return sent
                }
            }
            for await n in group { counter.wrappingAdd(n, ordering: .relaxed) }
        }
        return counter.load(ordering: .relaxed)
    }
}
