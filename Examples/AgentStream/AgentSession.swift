import Foundation
import ExampleSupport
import Switchboard
import SwitchboardCore
import SwitchboardChannel

/// Token bucket: `rate` tokens per second, at most `burst` saved up.
struct TokenBucket: Sendable {
    let rate: Double
    let burst: Double
    private var tokens: Double
    private var last: ContinuousClock.Instant

    init(rate: Double, burst: Int, now: ContinuousClock.Instant = .now) {
        self.rate = max(rate, 0.001)
        self.burst = Double(max(burst, 1))
        self.tokens = self.burst
        self.last = now
    }

    /// Takes a token: nil when allowed, else the seconds until one is available.
    mutating func take(now: ContinuousClock.Instant = .now) -> Double? {
        let d = now - last
        last = now
        tokens = min(burst, tokens + (Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18) * rate)
        if tokens >= 1 {
            tokens -= 1
            return nil
        }
        return ((1 - tokens) / rate * 1000).rounded(.up) / 1000
    }

    /// Gives back a token taken for a message that another bucket then refused.
    mutating func refund() {
        tokens = min(burst, tokens + 1)
    }
}

/// How long a session outlives its connection, and how many of its events it keeps for a
/// reconnecting client.
struct SessionLimits: Sendable {
    /// A session with no connection for this long is ended (its turn cancelled).
    var grace: Duration = .seconds(30)
    /// Events kept for replay (and queued for a slow client) at most.
    var bufferEvents = 1_000
    /// Bytes of those events at most.
    var bufferBytes = 1 << 20
}

/// One session: outlives its connections for ``SessionLimits/grace``, reads commands while the
/// current turn streams its events, and numbers every event (`seq`, from 1) but one: the
/// `refreshed` answer to a connection's `refresh`.
///
/// Ordering and memory: every outbound event is numbered and appended to one bounded log
/// (`TopicReplayLog`), which is also the send queue: the current connection's writer sends
/// from it in order. The exception, `refreshed`, belongs to the connection that refreshed its
/// token: it waits in that attachment's one unnumbered slot, is sent before the next numbered
/// events, and is never replayed. A reconnecting client gets the events after its `last_seq` from the same
/// log, then the live ones; a client too slow for the log's bound is closed with 1013 and
/// resumes (or is told that it cannot). A turn's event is appended only if its generation is
/// still current, checked and appended in one actor step, so nothing of a cancelled or
/// pre-empted turn can follow the `result` that ended it, or any event of the next turn.
actor AgentSession {
    private struct ActiveTurn {
        let generation: UInt64
        let number: Int
        let task: Task<Void, Never>
        let startedAt: ContinuousClock.Instant
    }

    /// The connection being served, and its writer's wake-up.
    ///
    /// The waiter is resumed only by ``wake()``, which takes it first: a continuation resumed
    /// twice kills the process (`SWIFT TASK CONTINUATION MISUSE`), so no other code touches it.
    private struct Attachment {
        let id: UInt64
        let connection: WebSocketConnection
        /// The writer suspended in `nextBatch`, waiting for something to send.
        private var waiter: CheckedContinuation<Void, Never>?
        /// The last `seq` its writer sent.
        var sent: UInt64
        /// Too slow for the log's bound: nothing more is sent from the log.
        var overrun = Overrun.none
        /// Its writer has lines to send first (``AgentSession/resend``: the resume failure,
        /// pending permission requests) and has not finished sending them: an overrun meanwhile
        /// closes the connection after them, not at once (a close issued while the writer's send
        /// is on its way to the connection could overtake it, and the resume failure be lost).
        var resending = false
        /// An unnumbered event for this connection only (`refreshed`), sent once the numbered
        /// events up to `after` (those queued before it) are, and never kept for replay. One
        /// at most: a newer one replaces it, so a client that sends refreshes without reading
        /// holds one line here, not a queue.
        var unnumbered: (line: String, after: UInt64)?

        init(id: UInt64, connection: WebSocketConnection, sent: UInt64) {
            self.id = id
            self.connection = connection
            self.sent = sent
        }

        /// Wakes the writer if it waits (once: the waiter is taken before it is resumed).
        mutating func wake() {
            let waiting = waiter
            waiter = nil
            waiting?.resume()
        }

        /// Parks the writer until the next ``wake()``. A writer already waiting is woken first
        /// (there is one writer per attachment, so this does not happen; it keeps the
        /// continuation from leaking if it ever did).
        mutating func park(_ continuation: CheckedContinuation<Void, Never>) {
            wake()
            waiter = continuation
        }
    }

    /// Where a connection too slow for the log's bound is in being closed.
    enum Overrun {
        case none
        /// Its writer sends `resend` (the resume failure, pending permission requests), which
        /// must come first, then closes it.
        case closeAfterResend
        /// Its close is under way: nothing more is sent.
        case closed
    }

    /// What a writer sends next.
    enum Batch {
        /// Lines numbered `first`, `first + 1`, …
        case lines(first: UInt64, [String])
        /// Lines sent again (pending permission requests, with their original `seq`), or an
        /// unnumbered line: sent as they are, not counted as sent from the log.
        case again([String])
        /// The log dropped events not sent yet: the client is too slow.
        case overrun
        /// Another connection took over, or this one ended.
        case stop
    }

    let sessionID: String
    /// The id as logged: escaped and cut (``TerminalText/inline(_:maxLength:)``), never raw.
    private let shownID: String
    /// Who owns the session: the subject (`sub`) of the token it was opened with when the
    /// server verifies tokens, else the bearer token it was opened with (nil: none); never
    /// logged.
    let identity: String?
    /// Checks a `refresh` command's token (nil: the server verifies no tokens, and refuses it).
    private let verifier: TokenVerifier?
    private let agent: any Agent
    private let limits: SessionLimits
    private let onExpired: @Sendable (AgentSession) -> Void
    private var limiter: TokenBucket
    /// The client's bucket, shared by its sessions (nil: per-client limits are off).
    private let clientLimiter: ClientRateLimiter?
    private var generation: UInt64 = 0
    private var active: ActiveTurn?
    private var turnCount = 0
    private var pending: [String: (name: String, continuation: CheckedContinuation<PermissionDecision?, Never>)] = [:]
    /// Pending permission requests as sent (with their `seq`), sent again on a reconnection.
    private var pendingLines: [String: (sequence: UInt64, line: String)] = [:]
    private var alwaysAllowed: Set<String> = []
    private var events: TopicReplayLog<String>
    private var attachment: Attachment?
    private var attachments: UInt64 = 0
    /// Lines to send again first on the current attachment.
    private var resend: [String] = []
    private var graceTimer: Task<Void, Never>?
    private var ranMessageIDs = RecentIDs(capacity: 256)
    private var answeredToolUses = RecentIDs(capacity: 64)
    private(set) var ended = false

    init(sessionID: String, identity: String?, agent: any Agent, rate: Double, burst: Int,
         clientLimiter: ClientRateLimiter? = nil, limits: SessionLimits, verifier: TokenVerifier? = nil,
         onExpired: @escaping @Sendable (AgentSession) -> Void) {
        self.sessionID = sessionID
        self.verifier = verifier
        self.shownID = TerminalText.inline(sessionID)
        self.clientLimiter = clientLimiter
        self.identity = identity
        self.agent = agent
        self.limits = limits
        self.onExpired = onExpired
        self.limiter = TokenBucket(rate: rate, burst: burst)
        // Time plays no part: the grace period bounds a session's life, the count and bytes its log.
        events = TopicReplayLog(epoch: "session", limits: .init(maxMessages: limits.bufferEvents, maxBytes: limits.bufferBytes,
                                                             maxAge: .seconds(100 * 365 * 86_400)))
    }

    /// Serves `connection` until it ends: takes the session over from a previous connection
    /// (closed with 1008 "replaced"), replays the events after `lastSequence` (or says that it
    /// cannot), then streams live events and reads commands. `resumeFailure`: the client asked
    /// to resume a session that no longer exists (this one is new). Returns false at once when
    /// the session ended meanwhile (its grace period ran out): open a new one.
    func serve(_ connection: WebSocketConnection, lastSequence: UInt64?, resumeFailure: String? = nil) async -> Bool {
        guard !ended else { return false }
        let id = attach(connection, lastSequence: lastSequence, resumeFailure: resumeFailure)
        let writer = Task.detached { [self] in await self.write(to: connection, attachment: id) }
        for await line in connection.lines() {
            await handle(line, from: connection, attachment: id)
        }
        detach(id)
        await writer.value
        return true
    }

    private func attach(_ connection: WebSocketConnection, lastSequence: UInt64?, resumeFailure: String?) -> UInt64 {
        attachments &+= 1
        let id = attachments
        if var old = attachment {
            // Its writer stops (it finds another attachment, or none); nothing may wake it again.
            old.wake()
            attachment = nil
            let replaced = old.connection
            Task { await replaced.close(code: .policyViolation, reason: "replaced") }
            log("session \(shownID) taken over by a new connection")
        }
        graceTimer?.cancel()
        graceTimer = nil
        var start = events.lastSequence
        var failure = resumeFailure
        if failure == nil, let lastSequence {
            switch events.replay(after: TopicPosition(epoch: events.epoch, sequence: lastSequence), now: .now) {
            case .recovered: start = lastSequence
            case .failed(let reason): failure = reason.rawValue
            }
        }
        // A pending permission request the client had already received is sent again, as it was
        // (after the failure, if any: that comes first).
        resend = pendingLines.values.filter { $0.sequence <= start }.sorted { $0.sequence < $1.sequence }.map(\.line)
        if let failure {
            let line = ChannelEvent.resumeFailed(reason: failure).jsonLine
            start = append(line)
            resend.insert(Self.numbered(line, start), at: 0)
        }
        attachment = Attachment(id: id, connection: connection, sent: start)
        attachment?.resending = !resend.isEmpty
        return id
    }

    private func detach(_ id: UInt64) {
        guard attachment?.id == id else { return }
        attachment?.wake()
        attachment = nil
        resend = []
        let grace = limits.grace
        log("session \(shownID) detached: ends after \(grace) unless a client resumes it")
        graceTimer = Task { [weak self] in
            do { try await Task.sleep(for: grace) } catch { return }
            await self?.expireIfDetached()
        }
    }

    /// The grace period is over with no connection: the turn is cancelled, the session ends.
    private func expireIfDetached() {
        guard attachment == nil, !ended else { return }
        ended = true
        log("session \(shownID) ended: no connection for \(limits.grace)")
        cancelActive(confirm: false)
        onExpired(self)
    }

    /// Ends the session because the server has stopped: its turn is cancelled (its agent
    /// process killed). Returns that turn's task, which ends once the agent has exited (or nil).
    func endForShutdown() -> Task<Void, Never>? {
        guard !ended else { return nil }
        ended = true
        graceTimer?.cancel()
        graceTimer = nil
        let turn = active?.task
        cancelActive(confirm: false)
        return turn
    }

    /// Ends the session at once (the registry evicted it to make room for a new one, and has
    /// forgotten it already): its turn is cancelled and its agent process killed.
    func evict() {
        guard !ended else { return }
        ended = true
        graceTimer?.cancel()
        graceTimer = nil
        log("session \(shownID) evicted: detached, and the server is at its session cap")
        cancelActive(confirm: false)
        if var current = attachment {
            // Not expected (only detached sessions are evicted): its connection ends too.
            current.wake()
            attachment = nil
            let connection = current.connection
            Task { await connection.close(code: .tryAgainLater, reason: "session evicted") }
        }
    }

    /// The writer of attachment `id`: sends from the log in order until the attachment ends.
    private func write(to connection: WebSocketConnection, attachment id: UInt64) async {
        guard var sent = attachment?.sent, attachment?.id == id else { return }
        while true {
            switch await nextBatch(for: id, after: sent) {
            case .stop:
                return
            case .overrun:
                closeTooSlow(connection)
                return
            case .again(let lines):
                for line in lines {
                    do { try await connection.send(text: line + "\n") } catch { return }
                }
                // Sent (resend comes before anything else): an overrun now closes at once.
                if attachment?.id == id { attachment?.resending = false }
            case .lines(let first, let lines):
                for (offset, line) in lines.enumerated() {
                    // Closed for being too slow or taken over meanwhile: the rest is not sent.
                    guard let current = attachment, current.id == id, current.overrun == .none else { return }
                    do { try await connection.send(text: line + "\n") } catch { return }
                    sent = first + UInt64(offset)
                    if attachment?.id == id { attachment?.sent = sent }
                }
            }
        }
    }

    private func nextBatch(for id: UInt64, after sent: UInt64) async -> Batch {
        while true {
            guard let current = attachment, current.id == id else { return .stop }
            if !resend.isEmpty {
                defer { resend = [] }
                return .again(resend)
            }
            if let pending = current.unnumbered, current.overrun == .none, sent >= pending.after {
                attachment?.unnumbered = nil
                return .again([pending.line])
            }
            switch current.overrun {
            case .closed:
                return .stop
            case .closeAfterResend:
                attachment?.overrun = .closed
                return .overrun
            case .none:
                break
            }
            if events.lastSequence > sent {
                switch events.replay(after: TopicPosition(epoch: events.epoch, sequence: sent), now: .now) {
                case .recovered(let lines):
                    // Up to a waiting unnumbered event's place first.
                    if let after = current.unnumbered?.after, after > sent, after - sent < UInt64(lines.count) {
                        return .lines(first: sent + 1, Array(lines.prefix(Int(after - sent))))
                    }
                    return .lines(first: sent + 1, lines)
                case .failed:
                    attachment?.overrun = .closed
                    return .overrun
                }
            }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                // Checked above in this same actor step: the attachment is still this writer's.
                if attachment?.id == id { attachment?.park(continuation) } else { continuation.resume() }
            }
        }
    }

    // MARK: Inbound

    /// Handles one command line of `connection` (attachment `id`). Commands are handled one
    /// at a time, in order: a `refresh` waits for its verification before the next line.
    private func handle(_ line: Data, from connection: WebSocketConnection, attachment id: UInt64) async {
        let command: ChannelCommand
        do {
            command = try ChannelCommand(line: line)
        } catch {
            switch RefreshCommand(line: line) {
            case .refresh(let token)?:
                await refresh(token: token, connection: connection, attachment: id)
            case .malformed(let reason)?:
                send(.error(message: reason, type: "invalid_request_error", param: nil, code: "invalid_command"))
            case nil:
                send(.error(message: error.reason, type: "invalid_request_error", param: nil, code: "invalid_command"))
            }
            return
        }
        switch command {
        case .message(let content, let model, let id):
            if let id {
                // Sent again after a reconnect: it ran (or was refused) already.
                guard ranMessageIDs.insert(id) else {
                    log("session \(shownID): message \(TerminalText.inline(id)) already received, not run again")
                    return
                }
            }
            // Both the session's bucket and its client's (all its sessions together).
            if let retryAfter = limiter.take() {
                send(.rateLimited(retryAfter: retryAfter))
                return
            }
            if let retryAfter = clientLimiter?.take() {
                limiter.refund()
                send(.rateLimited(retryAfter: retryAfter))
                return
            }
            cancelActive(confirm: true)
            startTurn(prompt: content, model: model)
        case .cancel:
            if active == nil {
                send(.system(message: "no turn is running"))
            } else {
                cancelActive(confirm: true)
            }
        case .permission(let id, let decision):
            guard let entry = pending.removeValue(forKey: id) else {
                // A second answer to a request sent again after a reconnect: already applied.
                if answeredToolUses.contains(id) { return }
                send(.error(message: "no pending permission request \(id)", type: "invalid_request_error",
                            param: "tool_use_id", code: "unknown_tool_use_id"))
                return
            }
            pendingLines[id] = nil
            answeredToolUses.insert(id)
            if decision == .alwaysAllow { alwaysAllowed.insert(entry.name) }
            entry.continuation.resume(returning: decision)
        }
    }

    /// `refresh`: verifies the token, which must be for the session's owner (its `sub`), moves
    /// the connection's deadline to the token's expiry (never earlier; no `exp`: no deadline)
    /// and confirms with an unnumbered `refreshed` event. An invalid token, or one for another
    /// subject, gets an `error` `invalid_token`, and the connection keeps its deadline.
    private func refresh(token: String, connection: WebSocketConnection, attachment id: UInt64) async {
        guard let verifier else {
            send(.error(message: "this server verifies no tokens: there is nothing to refresh",
                        type: "invalid_request_error", param: nil, code: "refresh_unsupported"))
            return
        }
        let result = await verifier.check(token)
        switch result {
        case .invalid(let code, let message):
            refuseRefresh("\(message) (\(code))")
        case .valid(let subject, let expiresAt):
            guard let identity, subject == identity else {
                refuseRefresh("the token is for another subject than the session's")
                return
            }
            await connection.extendAuthentication(until: expiresAt ?? .distantFuture)
            // Not numbered, not replayed: it answers this connection, and one that resumes the
            // session brings a token of its own.
            sendUnnumbered(ChannelEvent.refreshed(expiresAt: expiresAt).jsonLine, attachment: id)
        }
    }

    private func refuseRefresh(_ why: String) {
        send(.error(message: "refresh refused: \(why)", type: "authentication_error", param: nil, code: "invalid_token"))
    }

    private func startTurn(prompt: String, model: String?) {
        generation &+= 1
        turnCount += 1
        let context = TurnContext(session: self, generation: generation, number: turnCount, startedAt: .now)
        let agent = self.agent
        let task = Task {
            do {
                try await agent.run(prompt: prompt, model: model, turn: context)
            } catch is CancellationError {
            } catch {
                do {
                    try await context.emit(.error(message: "\(error)", type: "agent_error", param: nil, code: nil))
                    try await context.emit(.result(numTurns: context.number, durationMs: context.elapsedMilliseconds,
                                                   totalCostUsd: 0, subtype: .error))
                } catch {
                    log("turn \(context.number) failed and could not be reported: \(error)")
                }
            }
            self.turnEnded(context.generation)
        }
        active = ActiveTurn(generation: generation, number: turnCount, task: task, startedAt: context.startedAt)
    }

    private func turnEnded(_ generation: UInt64) {
        guard let turn = active, turn.generation == generation else { return }
        active = nil
        log("session \(shownID): turn \(turn.number) finished")
    }

    /// Ends the running turn at once: bumps the generation (its later events are dropped),
    /// releases a pending permission wait, cancels its task (which kills a spawned process),
    /// and with `confirm` queues `result` / `cancelled`.
    private func cancelActive(confirm: Bool) {
        guard let turn = active else { return }
        active = nil
        generation &+= 1
        let waiting = pending
        pending = [:]
        pendingLines = [:]
        for (_, entry) in waiting { entry.continuation.resume(returning: nil) }
        turn.task.cancel()
        if confirm {
            let d = ContinuousClock.now - turn.startedAt
            let ms = Int(d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000)
            send(.result(numTurns: turn.number, durationMs: ms, totalCostUsd: 0, subtype: .cancelled))
        }
    }

    // MARK: Outbound

    /// Numbers `line` (a JSON object: `"seq":N` is added as its last member), keeps it in the
    /// log and wakes the writer. Returns its `seq`.
    @discardableResult
    private func append(_ line: String) -> UInt64 {
        let sequence = events.lastSequence + 1
        let numbered = Self.numbered(line, sequence)
        events.append(numbered, bytes: numbered.utf8.count, now: .now)
        attachment?.wake()
        // The buffer dropped an event the writer had not sent: the connection is closed (the
        // client resumes, or is told what it lost).
        if let current = attachment, current.overrun == .none, current.sent < events.lastSequence - UInt64(events.count) {
            if !current.resending {
                // The writer may be stuck in a send behind a client that does not read: close now.
                attachment?.overrun = .closed
                closeTooSlow(current.connection)
            } else {
                // The writer has not finished what must come first on this connection, such as
                // the resume failure: it sends that, then closes. (A client that never reads
                // even that is closed by its connection's `writeStallTimeout`.)
                attachment?.overrun = .closeAfterResend
            }
        }
        return sequence
    }

    private func closeTooSlow(_ connection: WebSocketConnection) {
        log("session \(shownID): client too slow, events dropped from the buffer before being sent")
        Task { await connection.close(code: .tryAgainLater, reason: "event buffer exceeded") }
    }

    /// `line` with `"seq":N` as its last member (a line that is not an object is wrapped as
    /// the agent's text: it is never sent unnumbered).
    static func numbered(_ line: String, _ sequence: UInt64) -> String {
        var body = Substring(line)
        while let last = body.last, last.isWhitespace { body.removeLast() }
        while let first = body.first, first.isWhitespace { body.removeFirst() }
        guard body.first == "{", body.last == "}" else {
            return String(ChannelEvent.system(message: String(body)).jsonLine.dropLast()) + ",\"seq\":\(sequence)}"
        }
        let inner = body.dropFirst().dropLast()
        let empty = inner.allSatisfy(\.isWhitespace)
        return "{" + inner + (empty ? "" : ",") + "\"seq\":\(sequence)}"
    }

    /// Session-level events (not tied to a turn).
    private func send(_ event: ChannelEvent) {
        append(event.jsonLine)
    }

    /// Sends `line` unnumbered to attachment `id` only (if it is still current), replacing one
    /// not sent yet: it is not kept in the log, so a resumed connection never gets it.
    private func sendUnnumbered(_ line: String, attachment id: UInt64) {
        guard attachment?.id == id else { return }
        attachment?.unnumbered = (line, events.lastSequence)
        attachment?.wake()
    }

    /// Queues a turn's event line if its turn is still current.
    func emit(_ line: String, generation: UInt64) -> Bool {
        guard generation == self.generation else { return false }
        append(line)
        return true
    }

    func requestPermission(toolUseId: String, name: String, input: JSONValue,
                           generation: UInt64) async -> PermissionDecision? {
        guard generation == self.generation else { return nil }
        if alwaysAllowed.contains(name) { return .alwaysAllow }
        let sequence = append(ChannelEvent.permissionRequest(toolUseId: toolUseId, name: name, input: input).jsonLine)
        pendingLines[toolUseId] = (sequence, Self.numbered(
            ChannelEvent.permissionRequest(toolUseId: toolUseId, name: name, input: input).jsonLine, sequence))
        return await withCheckedContinuation { continuation in
            if let old = pending.updateValue((name, continuation), forKey: toolUseId) {
                old.continuation.resume(returning: nil)
            }
        }
    }
}

/// The most recent `capacity` ids, for duplicate checks in bounded memory.
struct RecentIDs: Sendable {
    let capacity: Int
    private var order: [String] = []
    private var members: Set<String> = []
    private var next = 0

    init(capacity: Int) { self.capacity = max(1, capacity) }

    func contains(_ id: String) -> Bool { members.contains(id) }

    /// False when `id` is among the recent ones already.
    @discardableResult
    mutating func insert(_ id: String) -> Bool {
        guard !members.contains(id) else { return false }
        if order.count < capacity {
            order.append(id)
        } else {
            members.remove(order[next])
            order[next] = id
            next = (next + 1) % capacity
        }
        members.insert(id)
        return true
    }
}
