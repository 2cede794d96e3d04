import Logging
import Switchboard

/// A Redis Cluster client: each command goes to the master serving its key's hash slot, over one
/// pipelined ``RedisClient`` connection per master.
///
/// ```swift
/// let cluster = try RedisClusterClient(url: RedisURL("redis-cluster://10.0.0.1:7000,10.0.0.2:7000"))
/// try await cluster.send(key: "user:{42}:name", "SET", "user:{42}:name", "Ada")
/// let name = try await cluster.send(key: "user:{42}:name", "GET", "user:{42}:name").string
/// ```
///
/// The key only routes the command: the arguments are the whole command, the key included
/// where the command puts it. Keys of one command (or script) must share a slot: give them the
/// same hash tag (`{42}` above; see ``RedisClusterSlot``).
///
/// Slot map: fetched with `CLUSTER SLOTS` from the seed nodes of the URL in turn (by
/// ``connect()`` or the first command), then from the nodes it names. Each master gets one
/// connection, opened by its first command, so commands to one node are pipelined and keep
/// their order; a node that leaves the map is closed once its last command is answered.
///
/// Redirections and retries (Redis Cluster specification, "Redirection and resharding"):
/// - `MOVED`: the map is refreshed (one refresh at a time: every command that needs it waits
///   for the same one) and the command is sent to the node named.
/// - `ASK`: `ASKING` and the command are sent back to back to the node named, on its one
///   connection, with nothing between them; the map stays.
/// - `TRYAGAIN`, `CLUSTERDOWN`, or the master unreachable (the command was not sent): the
///   command is retried after 50 ms, doubling up to 1 s, the map refreshed from the other
///   nodes meanwhile, so a command for a failed master's slots succeeds on its replica once
///   that is promoted.
/// At most ``RedisConfiguration/maximumClusterRedirects`` redirections and
/// ``RedisConfiguration/clusterRetryBudget`` of retrying per command; beyond, the command fails
/// with `.unavailable` (it did not run). A command whose connection is lost after it was sent
/// (`.connectionLost`, `.timedOut`) may have run and is not retried; the map is refreshed.
///
/// The URL's credentials and TLS (`rediss-cluster://`) apply to every node; each node connects,
/// reconnects and is bounded as a ``RedisClient`` with the same ``RedisConfiguration``. Node
/// addresses come from the cluster (`CLUSTER SLOTS`, `MOVED`, `ASK`), as the nodes announce
/// them. Logs name the cluster by its URL with the password redacted; errors never hold it.
public final class RedisClusterClient: Sendable {
    let router: RedisClusterRouter
    let configuration: RedisConfiguration
    let logger: Logger

    /// The first wait before retrying a command the cluster cannot serve now.
    static let firstRetryDelay: Duration = .milliseconds(50)
    /// The longest wait between two tries of one command.
    static let maximumRetryDelay: Duration = .seconds(1)

    /// A client for the cluster whose seed nodes `url` lists (`redis-cluster://` or
    /// `rediss-cluster://`); nothing is connected yet. `group` provides the nodes' event loops
    /// (the shared group by default). Any other URL, or a Cluster URL without seeds or with a
    /// database other than 0, throws `.invalidArgument`.
    public init(url: RedisURL, configuration: RedisConfiguration = RedisConfiguration(),
                group: EventLoopGroup? = nil, logger: Logger = Logger(label: "switchboard.redis")) throws(RedisError) {
        guard let cluster = url.cluster else {
            throw RedisError(kind: .invalidArgument,
                             message: "\(url) is not a Redis Cluster URL: expected redis-cluster:// or rediss-cluster:// and the seed nodes")
        }
        guard !cluster.seeds.isEmpty else {
            throw RedisError(kind: .invalidArgument, message: "the Redis Cluster URL \(url) lists no seed node")
        }
        guard url.database == 0 else {
            throw RedisError(kind: .invalidArgument,
                             message: "a Redis Cluster has only database 0, not \(url.database) (\(url))")
        }
        self.configuration = configuration
        self.logger = logger
        router = RedisClusterRouter(url: url, configuration: configuration, group: group, logger: logger)
    }

    /// The cluster's URL: its seed nodes (its description hides the password).
    public var url: RedisURL { router.url }

    /// Fetches the slot map now, asking the seed nodes in turn (a no-op once a map is there).
    /// Throws `.unavailable` when no seed answers `CLUSTER SLOTS` with a usable map (the error
    /// names the last failure). Connections to the masters are opened by their first command.
    public func connect() async throws(RedisError) {
        guard await router.generation == 0 else { return }
        if let error = await router.refresh(after: 0) { throw error }
    }

    /// Fetches the slot map again now, from the nodes of the current map and then the seeds (a
    /// refresh already under way is shared). Commands refresh the map themselves when a node
    /// answers `MOVED` or cannot be reached; this is for a caller that learnt of a change
    /// otherwise, for example a health check whose `PING` to a master failed. Throws
    /// `.unavailable` when no node answers with a usable map (the map in use stays).
    public func refreshSlotMap() async throws(RedisError) {
        let generation = await router.generation
        if let error = await router.refresh(after: generation) { throw error }
    }

    /// The slot map in use now (empty before the first one is fetched): which master serves
    /// which slots, and their replicas.
    public var slotMap: RedisClusterSlotMap {
        get async { await router.map }
    }

    /// Sends a command to the master of `key`'s slot and returns its reply; `arguments` are the
    /// whole command (name first). An error reply throws `.server` with Redis's message.
    @discardableResult
    public func send(key: String, _ arguments: String...) async throws(RedisError) -> RESPValue {
        try await send(key: key, arguments)
    }

    /// Sends a command given as strings to the master of `key`'s slot.
    @discardableResult
    public func send(key: String, _ arguments: [String]) async throws(RedisError) -> RESPValue {
        try await send(slot: RedisClusterSlot.slot(of: key), arguments.map { Array($0.utf8) })
    }

    /// Sends a command whose arguments are raw bytes (binary-safe) to the master of the slot of
    /// `keyBytes`.
    @discardableResult
    public func send(keyBytes: [UInt8], _ arguments: [[UInt8]]) async throws(RedisError) -> RESPValue {
        try await send(slot: RedisClusterSlot.slot(of: keyBytes), arguments)
    }

    /// Sends a command to every master of the current map at once (fetching the map first if
    /// there is none), without following redirections: for commands about a node rather than a
    /// key (`PING`, `INFO`, `DBSIZE`). Each master's reply or error, by address; throws only
    /// when there is no map.
    public func send(toAllMasters arguments: [String]) async throws(RedisError) -> [RedisURL.Address: Result<RESPValue, RedisError>] {
        guard !arguments.isEmpty else { throw RedisError(kind: .invalidArgument, message: "empty command") }
        try await connect()
        let leases = try await router.leaseMasters()
        let command = arguments.map { Array($0.utf8) }
        let results = await withTaskGroup(of: (RedisURL.Address, Result<RESPValue, RedisError>).self) { group in
            for lease in leases {
                group.addTask {
                    do throws(RedisError) {
                        return (lease.address, .success(try await lease.client.send(bytes: command)))
                    } catch {
                        return (lease.address, .failure(error))
                    }
                }
            }
            var results: [RedisURL.Address: Result<RESPValue, RedisError>] = [:]
            for await (address, result) in group { results[address] = result }
            return results
        }
        for lease in leases { await router.release(lease) }
        return results
    }

    /// Closes every node's connection; commands waiting fail with `.closed`. The client cannot
    /// be reused.
    public func close() async {
        await router.close()
    }

    /// Where the next try of a command goes.
    private enum Target {
        /// The master of the slot in the current map.
        case master
        /// The node named by `MOVED`.
        case moved(RedisURL.Address)
        /// The node named by `ASK`, after `ASKING`.
        case asking(RedisURL.Address)
    }

    /// Sends `arguments` to the master of `slot`, following redirections and retrying within
    /// the configuration's bounds (see the type's description).
    func send(slot: Int, _ arguments: [[UInt8]]) async throws(RedisError) -> RESPValue {
        guard !arguments.isEmpty else { throw RedisError(kind: .invalidArgument, message: "empty command") }
        guard RedisClusterSlot.range.contains(slot) else {
            throw RedisError(kind: .invalidArgument, message: "slot \(slot) is not within 0...16383")
        }
        let deadline = ContinuousClock.now + configuration.clusterRetryBudget
        var delay = Self.firstRetryDelay
        var redirects = 0
        var target = Target.master
        while true {
            let lease: RedisClusterRouter.Lease
            switch target {
            case .master:
                guard let found = try await router.lease(slot: slot) else {
                    // No master known for the slot: no map yet, or the map leaves it unserved.
                    let generation = await router.generation
                    if let error = await router.refresh(after: generation) {
                        if generation == 0 || error.kind == .closed { throw error }
                        try await pause(&delay, until: deadline, slot: slot, because: error)
                    } else if await router.map.master(for: slot) == nil {
                        try await pause(&delay, until: deadline, slot: slot, because: RedisError(
                            kind: .unavailable, message: "no master of the Redis Cluster serves slot \(slot)"))
                    }
                    continue
                }
                lease = found
            case .moved(let address), .asking(let address):
                lease = try await router.lease(address)
            }
            let result: Result<RESPValue, RedisError>
            if case .asking = target {
                result = await lease.client.sendBackToBack([[Array("ASKING".utf8)], arguments])
            } else {
                do throws(RedisError) {
                    result = .success(try await lease.client.send(bytes: arguments))
                } catch {
                    result = .failure(error)
                }
            }
            await router.release(lease)
            let error: RedisError
            switch result {
            case .success(let reply): return reply
            case .failure(let failure): error = failure
            }

            if error.kind == .server, let redirect = RedisClusterRedirect(errorMessage: error.message, from: lease.address) {
                switch redirect {
                case .moved(_, let to):
                    try countRedirect(&redirects, slot: slot, error: error)
                    logger.debug("Redis Cluster MOVED", metadata: ["slot": "\(slot)", "to": "\(to.map(\.description) ?? "?")"])
                    // The map is refreshed before the retry; the node named is tried even when
                    // the refresh fails or lags (the redirect is the newer word).
                    _ = await router.refresh(after: lease.generation)
                    target = to.map(Target.moved) ?? .master
                case .ask(_, let to):
                    try countRedirect(&redirects, slot: slot, error: error)
                    if let to {
                        target = .asking(to)
                    } else {
                        _ = await router.refresh(after: lease.generation)
                        try await pause(&delay, until: deadline, slot: slot, because: error)
                        target = .master
                    }
                case .tryAgain:
                    try await pause(&delay, until: deadline, slot: slot, because: error)
                    target = .master
                case .clusterDown:
                    _ = await router.refresh(after: lease.generation)
                    try await pause(&delay, until: deadline, slot: slot, because: error)
                    target = .master
                }
                continue
            }
            switch error.kind {
            case .unavailable:
                // Not sent: the node cannot be reached now (it failed, or is restarting). The
                // other nodes' map says whether another node serves the slot now (a replica
                // promoted); until then, wait and retry.
                let refreshError = await router.refresh(after: lease.generation)
                if refreshError?.kind == .closed { throw refreshError ?? error }
                if await router.map.master(for: slot) == lease.address {
                    try await pause(&delay, until: deadline, slot: slot, because: error)
                }
                target = .master
            case .connectionLost, .timedOut:
                // It may have run: not retried. Its node may have failed: refresh in passing.
                let router = router
                let generation = lease.generation
                Task { _ = await router.refresh(after: generation) }
                throw error
            default:
                throw error
            }
        }
    }

    /// Counts one `MOVED` or `ASK`; throws `.unavailable` beyond the configured maximum.
    private func countRedirect(_ redirects: inout Int, slot: Int, error: RedisError) throws(RedisError) {
        redirects += 1
        guard redirects <= configuration.maximumClusterRedirects else {
            throw RedisError(
                kind: .unavailable,
                message: "slot \(slot): the Redis Cluster \(url) redirected the command more than "
                    + "\(configuration.maximumClusterRedirects) times (maximumClusterRedirects); last: \(error.message)")
        }
    }

    /// Waits before the next try: `delay`, at most until `deadline`, then doubles `delay` (at
    /// most ``maximumRetryDelay``). Throws `.unavailable`, saying why, once `deadline` has
    /// passed or the task is cancelled.
    private func pause(_ delay: inout Duration, until deadline: ContinuousClock.Instant, slot: Int,
                       because error: RedisError) async throws(RedisError) {
        let now = ContinuousClock.now
        guard now < deadline, !Task.isCancelled else {
            throw RedisError(
                kind: .unavailable,
                message: "slot \(slot) of the Redis Cluster \(url) could not be served within "
                    + "\(configuration.clusterRetryBudget) (clusterRetryBudget); last: \(error.message)",
                underlying: error.underlying)
        }
        try? await Task.sleep(for: min(delay, deadline - now))
        delay = min(delay * 2, Self.maximumRetryDelay)
    }
}
