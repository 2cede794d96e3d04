import Logging
import Switchboard
import Synchronization

/// Sharded pub/sub over a Redis Cluster (`SSUBSCRIBE`, Redis ≥ 7): each channel is subscribed
/// on the master that owns its slot, over one pub/sub connection per such master (a
/// ``RedisSubscriberCore`` in mode `.sharded`, on a ``RedisLink``: TLS, auth and reconnection
/// as for any Redis connection). Channels of one `SSUBSCRIBE` share a slot (the core groups
/// them). A master's connection is closed once none of its channels is wanted.
///
/// Subscriptions follow the cluster: when a channel's subscription is lost (its node's
/// connection went down, a `sunsubscribe` push we did not ask for because the slot left the
/// node, a `MOVED` reply to `SSUBSCRIBE`), the slot map is refreshed through the cluster client
/// and the channel is subscribed on the master that owns it now, retrying with backoff (50 ms
/// doubling to 1 s) while no reachable master serves it. Once such a channel is confirmed again,
/// ``onPossibleGap`` hears it (messages published meanwhile were not received).
///
/// The handlers run on the node connections' event loops; they must not block.
final class RedisShardedSubscriber: Sendable {
    typealias Address = RedisURL.Address

    private struct State {
        /// Wanted channels → the master they are subscribed on (nil: no master known yet).
        var channels: [String: Address?] = [:]
        var nodes: [Address: RedisSubscriberCore] = [:]
        /// Nodes whose connection is down now.
        var down: Set<Address> = []
        /// Channels whose subscription was lost and is not confirmed again yet.
        var lost: Set<String> = []
        var rerouting = false
        /// Something changed while the rerouting task ran: it goes round once more.
        var dirty = false
        var closed = false
    }

    let cluster: RedisClusterClient
    private let group: EventLoopGroup?
    private let logger: Logger
    private let onMessage: RedisSubscriber.Handler
    private let onPossibleGap: @Sendable ([String]) -> Void
    private let state = Locked(State())

    init(cluster: RedisClusterClient, group: EventLoopGroup?, logger: Logger,
         onMessage: @escaping RedisSubscriber.Handler, onPossibleGap: @escaping @Sendable ([String]) -> Void) {
        self.cluster = cluster
        self.group = group
        self.logger = logger
        self.onMessage = onMessage
        self.onPossibleGap = onPossibleGap
    }

    /// Whether every wanted channel is subscribed on a master and confirmed.
    var isReady: Bool {
        let (cores, complete) = state.withLock { s in
            (Array(s.nodes.values), s.down.isEmpty && !s.channels.values.contains { $0 == nil })
        }
        return complete && cores.allSatisfy { $0.ready.load(ordering: .acquiring) }
    }

    /// Adds `channel` without waiting for its confirmation.
    func add(_ channel: String) {
        let isNew = state.withLock { s -> Bool in
            guard !s.closed, s.channels[channel] == nil else { return false }
            s.channels[channel] = .some(nil)
            return true
        }
        if isNew { scheduleReroute() }
    }

    /// Adds `channel`; true once its master confirmed the subscription (waiting for the
    /// master's first connection when it is being made), false when it cannot be confirmed now
    /// (no map, the master unreachable). Then it is subscribed as soon as possible, and
    /// ``onPossibleGap`` hears it once confirmed: the caller went on without its messages.
    func subscribe(_ channel: String) async -> Bool {
        add(channel)
        if state.withLock({ $0.channels[channel] ?? nil }) == nil { await placeUnassigned() }
        guard let core = state.withLock({ s -> RedisSubscriberCore? in
            if let address = s.channels[channel] ?? nil, let core = s.nodes[address] { return core }
            Self.markLost(channel, &s)
            return nil
        }) else { return false }
        return await withCheckedContinuation { c in
            core.link.loop.execute { [weak self] in
                // Answered false at once (the node is down): on this loop, before any
                // confirmation of the channel, which then reports the gap.
                guard !core.subscribe(channel, c) else { return }
                self?.state.withLock { s in Self.markLost(channel, &s) }
            }
        }
    }

    /// Marks `channel`, if still wanted, as lost: its next confirmation reports a possible gap.
    private static func markLost(_ channel: String, _ s: inout State) {
        if s.channels[channel] != nil { s.lost.insert(channel) }
    }

    /// Removes `channel` (on its master, once Redis processed the `SUNSUBSCRIBE`).
    func unsubscribe(_ channel: String) {
        let (core, emptied) = state.withLock { s -> (RedisSubscriberCore?, RedisSubscriberCore?) in
            guard let entry = s.channels.removeValue(forKey: channel) else { return (nil, nil) }
            s.lost.remove(channel)
            guard let address = entry, let core = s.nodes[address] else { return (nil, nil) }
            return (core, Self.retireIfUnused(address, &s))
        }
        if let core { core.link.loop.execute { core.unsubscribe(channel) } }
        if let emptied { emptied.link.loop.execute { emptied.close() } }
    }

    /// Closes every node connection for good.
    func close() async {
        let cores = state.withLock { s -> [RedisSubscriberCore] in
            s.closed = true
            s.channels = [:]
            let cores = Array(s.nodes.values)
            s.nodes = [:]
            return cores
        }
        for core in cores {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                core.link.loop.execute {
                    core.close()
                    c.resume()
                }
            }
        }
    }

    // MARK: Placement

    /// Removes the node at `address` if no wanted channel is on it; returns its core to close.
    private static func retireIfUnused(_ address: Address, _ s: inout State) -> RedisSubscriberCore? {
        guard !s.channels.values.contains(where: { $0 == address }) else { return nil }
        s.down.remove(address)
        return s.nodes.removeValue(forKey: address)
    }

    /// The core of the node at `address`, created (and started) if needed. Under the lock.
    private func core(for address: Address, _ s: inout State) -> RedisSubscriberCore? {
        if let core = s.nodes[address] { return core }
        let loop: EventLoop
        do {
            loop = try (group ?? EventLoopGroup.shared).next()
        } catch {
            logger.error("no event loop for a Redis Cluster subscriber connection", metadata: ["error": "\(error)"])
            return nil
        }
        let link = RedisLink(loop: loop, url: cluster.router.nodeURL(address), configuration: cluster.configuration,
                             logger: logger)
        let core = RedisSubscriberCore(
            link: link, mode: .sharded,
            onStateChange: { [weak self] change in self?.nodeChanged(address, change) },
            onMessage: onMessage)
        s.nodes[address] = core
        loop.execute { [weak self] in
            core.onConfirmed = { channel in self?.confirmed(channel) }
            core.onLost = { channels in self?.lost(channels, on: address) }
            core.link.start()
        }
        return core
    }

    /// Places the channels without a master on the current map's (fetching a map if none).
    private func placeUnassigned() async {
        if await cluster.router.generation == 0 { _ = try? await cluster.connect() }
        _ = await place(map: await cluster.slotMap)
    }

    /// Puts every wanted channel on its master in `map`: channels without a node, and channels
    /// whose slot `map` gives to another node. Returns whether something is still to do (a
    /// channel without a master, or on a node that is down).
    private func place(map: RedisClusterSlotMap) async -> Bool {
        var moves: [(channel: String, from: RedisSubscriberCore?, to: RedisSubscriberCore)] = []
        var emptied: [RedisSubscriberCore] = []
        let pending = state.withLock { s -> Bool in
            guard !s.closed else { return false }
            var pending = false
            for (channel, current) in s.channels {
                guard let target = map.master(for: RedisClusterSlot.slot(of: channel)) else {
                    pending = true
                    continue
                }
                if current == target {
                    if s.down.contains(target) { pending = true }
                    continue
                }
                guard let to = core(for: target, &s) else {
                    pending = true
                    continue
                }
                let from = current.flatMap { s.nodes[$0] }
                if current != nil { s.lost.insert(channel) }  // moved: messages may be missed
                s.channels[channel] = target
                moves.append((channel, from, to))
                if s.down.contains(target) { pending = true }
            }
            for address in Array(s.nodes.keys) {
                if let core = Self.retireIfUnused(address, &s) { emptied.append(core) }
            }
            return pending
        }
        for move in moves {
            if let from = move.from { from.link.loop.execute { from.unsubscribe(move.channel) } }
            let to = move.to
            to.link.loop.execute { to.subscribe(move.channel, nil) }
        }
        for core in emptied { core.link.loop.execute { core.close() } }
        return pending
    }

    /// Starts the rerouting task unless it runs: refreshes the map and places the channels,
    /// with backoff, until every channel is on a reachable master (or the subscriber closes).
    private func scheduleReroute() {
        let start = state.withLock { s -> Bool in
            guard !s.closed else { return false }
            if s.rerouting {
                s.dirty = true
                return false
            }
            s.rerouting = true
            return true
        }
        guard start else { return }
        Task { [weak self] in
            var delay: Duration = .milliseconds(50)
            while let self {
                let router = self.cluster.router
                _ = await router.refresh(after: await router.generation)
                let pending = await self.place(map: await router.map)
                let done = self.state.withLock { s -> Bool in
                    if s.closed || (!pending && !s.dirty) {
                        s.rerouting = false
                        return true
                    }
                    s.dirty = false
                    return false
                }
                if done { return }
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(1))
            }
        }
    }

    // MARK: Node events (on the node's loop)

    private func nodeChanged(_ address: Address, _ change: RedisConnectionState) {
        switch change {
        case .disconnected:
            state.withLock { s in
                guard s.nodes[address] != nil else { return }
                s.down.insert(address)
                for (channel, node) in s.channels where node == address { s.lost.insert(channel) }
            }
            // The node may have failed over: its replica may own its slots now.
            scheduleReroute()
        case .connected:
            // Back: its core subscribes its channels again itself.
            state.withLock { s in _ = s.down.remove(address) }
        }
    }

    private func confirmed(_ channel: String) {
        let gap = state.withLock { s -> Bool in s.channels[channel] != nil && s.lost.remove(channel) != nil }
        if gap { onPossibleGap([channel]) }
    }

    private func lost(_ channels: [String], on address: Address) {
        state.withLock { s in
            for channel in channels where s.channels[channel] == address {
                s.channels[channel] = .some(nil)
                s.lost.insert(channel)
            }
        }
        logger.info("Redis Cluster sharded subscriptions moved away from a node",
                    metadata: ["node": "\(address)", "channels": "\(channels.count)"])
        scheduleReroute()
    }
}
