import Foundation
import ExampleSupport
import Synchronization
import Switchboard
import SwitchboardCore

/// How many sessions may exist, and how many one client may own.
struct SessionCaps: Sendable {
    /// Sessions at most, attached or in their grace period (`--max-sessions`). 256: each may
    /// run an agent process (with its pipes and reader threads) and keep 1 MiB of events, so
    /// this bounds the server's processes, threads, descriptors and memory.
    var maxSessions = 256
    /// Sessions one client may own at most (`--max-sessions-per-client`; 0: no limit). 16 is
    /// plenty for a person with a few terminals and tabs, and keeps one client from taking every
    /// slot.
    var maxSessionsPerClient = 16
    /// How long a slot reserved by an accepted upgrade waits for its connection's handler: an
    /// upgrade that fails after `authenticate` (the 101 could not be written) never runs it.
    var reservationTimeout: Duration = .seconds(10)
}

/// Who a session counts against for the per-client cap and rate: a verified token's subject,
/// else a distinct bearer token, else the peer's address.
struct ClientKey: Hashable, Sendable {
    private let value: String

    /// The client behind an upgrade request: its bearer token when tokens tell clients apart
    /// (the server has no shared `--token`, and the client presented one), otherwise its peer
    /// IP address (`WebSocketUpgradeRequest.remoteAddress`; nil, in requests made by hand, counts
    /// as one "unknown" address). The token is kept in memory only, never logged.
    static func of(presentedToken: String?, sharedToken: String?, peerAddress: String?) -> ClientKey {
        if sharedToken == nil, let presentedToken { return ClientKey(value: "token:" + presentedToken) }
        return ClientKey(value: "address:" + (peerAddress ?? "unknown"))
    }

    /// The client behind a verified token (JWT flags): its subject (`sub`), whatever token it
    /// presents, so that fetching fresh tokens buys no new sessions.
    static func of(subject: String) -> ClientKey {
        ClientKey(value: "sub:" + subject)
    }
}

/// A client's message rate across all its sessions (a message must also pass its session's own).
final class ClientRateLimiter: Sendable {
    private let bucket: Protected<TokenBucket>

    init(rate: Double, burst: Int) { bucket = Protected(TokenBucket(rate: rate, burst: burst)) }

    /// Takes a token: nil when allowed, else the seconds until one is available.
    func take() -> Double? { bucket.withLock { $0.take() } }
}

/// What ``SessionRegistry/reserve(_:identity:client:)`` decided about an upgrade.
enum SessionAdmission: Equatable, Sendable {
    /// The session exists: a resume or a takeover, which takes no new slot.
    case existing
    /// A new session's slot is held for this upgrade until its handler claims it.
    case reserved
    /// The session belongs to another identity: token, or subject (403).
    case forbidden
    /// `maxSessions` are taken and none is detached (503).
    case serverFull
    /// The client owns `maxSessionsPerClient` sessions (429).
    case clientFull
}

/// The server's sessions by id, within ``SessionCaps``: a session outlives its connections for
/// its grace period, and only a client of the same identity (the verified token's subject with
/// the JWT flags, else the bearer token it was opened with) may take it over.
///
/// A new session's slot is taken in `authenticate` (``reserve(_:identity:client:)``), under the
/// same lock as the count, so two upgrades cannot both take the last slot; the connection's
/// handler then claims it (``claim(_:identity:client:)``). At the global cap the session
/// detached the longest (no connection, in its grace period) is evicted to make room; with
/// none detached the upgrade is refused.
final class SessionRegistry: Sendable {
    private struct Entry {
        /// Nil while reserved by an upgrade whose handler has not run yet.
        var session: AgentSession?
        let identity: String?
        let client: ClientKey?
        /// Connections being served (handlers between claim and release).
        var connections = 0
        /// When it was reserved, or when its last connection ended.
        var since: ContinuousClock.Instant
    }

    private struct Client {
        var sessions = 0
        let limiter: ClientRateLimiter
    }

    private struct State {
        var entries: [String: Entry] = [:]
        /// The entries still reserved (no session yet), by id: few, scanned for timeouts.
        var reservations: [String: ContinuousClock.Instant] = [:]
        var clients: [ClientKey: Client] = [:]
        var refused = 0
        var evicted = 0
    }

    /// What the handler's claim found.
    enum Claim {
        case session(AgentSession, created: Bool)
        case forbidden
        case full(SessionAdmission)
    }

    private let state = Protected(State())
    private let caps: SessionCaps
    private let clientRate: (rate: Double, burst: Int)
    private let make: @Sendable (_ id: String, _ identity: String?, _ limiter: ClientRateLimiter?,
                                 _ registry: SessionRegistry) -> AgentSession

    /// - Parameters:
    ///   - clientRate: each client's message bucket, shared by its sessions.
    ///   - make: makes a session (called under the registry's lock: it must not call back).
    init(caps: SessionCaps = SessionCaps(), clientRate: (rate: Double, burst: Int),
         make: @escaping @Sendable (_ id: String, _ identity: String?, _ limiter: ClientRateLimiter?,
                                    _ registry: SessionRegistry) -> AgentSession) {
        self.caps = caps
        self.clientRate = clientRate
        self.make = make
    }

    /// Decides an upgrade for session `id` in `authenticate`: a session that exists belongs to
    /// the identity it was opened with (compared in constant time) and takes no new slot; a new
    /// one takes a slot now, within the caps (evicting the longest-detached session at the
    /// global cap), or is refused.
    func reserve(_ id: String, identity: String?, client: ClientKey?,
                 now: ContinuousClock.Instant = .now) -> SessionAdmission {
        let (admission, evicted) = state.withLock { state -> (SessionAdmission, AgentSession?) in
            expireReservations(&state, now: now)
            if let existing = state.entries[id] {
                return (Self.same(existing.identity, identity) ? .existing : .forbidden, nil)
            }
            let (admission, evicted) = admitNew(&state, client: client)
            if admission == .reserved {
                insert(&state, id: id, session: nil, identity: identity, client: client, now: now)
                state.reservations[id] = now
            }
            return (admission, evicted)
        }
        if let evicted { Task { await evicted.evict() } }
        return admission
    }

    /// The session `id` for a connection's handler, counted as attached until
    /// ``release(_:)``: the one reserved or found in `authenticate`, or, when it is gone since
    /// (ended, evicted, its reservation timed out), a new one within the caps.
    func claim(_ id: String, identity: String?, client: ClientKey?, now: ContinuousClock.Instant = .now) -> Claim {
        let (claim, evicted) = state.withLock { state -> (Claim, AgentSession?) in
            if var entry = state.entries[id] {
                guard Self.same(entry.identity, identity) else { return (.forbidden, nil) }
                var created = false
                if entry.session == nil {
                    entry.session = make(id, identity, entry.client.flatMap { state.clients[$0]?.limiter }, self)
                    state.reservations[id] = nil
                    created = true
                }
                entry.connections += 1
                state.entries[id] = entry
                guard let session = entry.session else { return (.forbidden, nil) }
                return (.session(session, created: created), nil)
            }
            let (admission, evicted) = admitNew(&state, client: client)
            guard admission == .reserved else { return (.full(admission), evicted) }
            let session = make(id, identity, client.flatMap { state.clients[$0]?.limiter }, self)
            insert(&state, id: id, session: session, identity: identity, client: client, now: now)
            state.entries[id]?.connections = 1
            return (.session(session, created: true), evicted)
        }
        if let evicted { Task { await evicted.evict() } }
        return claim
    }

    /// A handler is done with `session`: when no connection is left, it is detached from now on.
    func release(_ session: AgentSession, now: ContinuousClock.Instant = .now) {
        state.withLock { state in
            guard var entry = state.entries[session.sessionID], entry.session === session else { return }
            entry.connections = max(0, entry.connections - 1)
            if entry.connections == 0 { entry.since = now }
            state.entries[session.sessionID] = entry
        }
    }

    /// Forgets `session` (its grace period ran out), unless another one took its id since.
    func remove(_ session: AgentSession) {
        state.withLock { state in
            guard let entry = state.entries[session.sessionID], entry.session === session else { return }
            delete(&state, id: session.sessionID)
        }
    }

    /// Every live session (for ending them all at shutdown).
    var sessions: [AgentSession] { state.withLock { $0.entries.values.compactMap(\.session) } }

    /// Sessions held: live ones and slots reserved by upgrades in progress.
    var count: Int { state.withLock { $0.entries.count } }

    /// New sessions refused so far (503 and 429).
    var refused: Int { state.withLock { $0.refused } }

    /// Detached sessions evicted so far to make room at the global cap.
    var evicted: Int { state.withLock { $0.evicted } }

    // MARK: Under the lock

    /// Room for one more session of `client`: refused (counted), or made (by evicting the
    /// longest-detached session at the global cap, removed here and returned to be ended).
    private func admitNew(_ state: inout State, client: ClientKey?) -> (SessionAdmission, AgentSession?) {
        if let client, caps.maxSessionsPerClient > 0,
           let owned = state.clients[client]?.sessions, owned >= caps.maxSessionsPerClient {
            state.refused += 1
            return (.clientFull, nil)
        }
        guard state.entries.count >= caps.maxSessions else { return (.reserved, nil) }
        var oldest: (id: String, since: ContinuousClock.Instant, session: AgentSession)?
        for (id, entry) in state.entries where entry.connections == 0 {
            guard let session = entry.session else { continue }
            if let current = oldest, current.since <= entry.since { continue }
            oldest = (id, entry.since, session)
        }
        guard let oldest else {
            state.refused += 1
            return (.serverFull, nil)
        }
        delete(&state, id: oldest.id)
        state.evicted += 1
        return (.reserved, oldest.session)
    }

    private func insert(_ state: inout State, id: String, session: AgentSession?, identity: String?,
                        client: ClientKey?, now: ContinuousClock.Instant) {
        state.entries[id] = Entry(session: session, identity: identity, client: client, since: now)
        if let client {
            let limiter = state.clients[client]?.limiter
                ?? ClientRateLimiter(rate: clientRate.rate, burst: clientRate.burst)
            state.clients[client, default: Client(limiter: limiter)].sessions += 1
        }
    }

    private func delete(_ state: inout State, id: String) {
        guard let entry = state.entries.removeValue(forKey: id) else { return }
        state.reservations[id] = nil
        guard let client = entry.client, var owner = state.clients[client] else { return }
        owner.sessions -= 1
        state.clients[client] = owner.sessions > 0 ? owner : nil
    }

    /// Slots reserved by upgrades whose handler never ran are given back.
    private func expireReservations(_ state: inout State, now: ContinuousClock.Instant) {
        guard !state.reservations.isEmpty else { return }
        for (id, at) in state.reservations where now - at > caps.reservationTimeout {
            if state.entries[id]?.session == nil { delete(&state, id: id) }
            state.reservations[id] = nil
        }
    }

    private static func same(_ a: String?, _ b: String?) -> Bool {
        switch (a, b) {
        case (nil, nil): true
        case (let x?, let y?): ConstantTime.equals(x, y)
        default: false
        }
    }
}
