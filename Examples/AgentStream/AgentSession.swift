import Foundation
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
}

/// One connection = one session: reads commands while the current turn streams its events.
///
/// Ordering: every outbound line goes through one queue (`outbound`) drained by a single
/// writer task. A turn's event is queued only if its generation is still current, checked and
/// queued in one actor step, so nothing of a cancelled or pre-empted turn can follow the
/// `result` that ended it, or any event of the next turn.
actor AgentSession {
    private struct ActiveTurn {
        let generation: UInt64
        let number: Int
        let task: Task<Void, Never>
        let startedAt: ContinuousClock.Instant
    }

    private let connection: WebSocketConnection
    private let sessionID: String
    private let agent: any Agent
    private let outbound: AsyncStream<String>.Continuation
    private let outboundStream: AsyncStream<String>
    private var limiter: TokenBucket
    private var generation: UInt64 = 0
    private var active: ActiveTurn?
    private var turnCount = 0
    private var pending: [String: (name: String, continuation: CheckedContinuation<PermissionDecision?, Never>)] = [:]
    private var alwaysAllowed: Set<String> = []

    init(connection: WebSocketConnection, sessionID: String, agent: any Agent, rate: Double, burst: Int) {
        self.connection = connection
        self.sessionID = sessionID
        self.agent = agent
        self.limiter = TokenBucket(rate: rate, burst: burst)
        (outboundStream, outbound) = AsyncStream.makeStream(of: String.self)
    }

    func run() async {
        let connection = self.connection
        let stream = outboundStream
        let writer = Task.detached {
            for await line in stream {
                do { try await connection.send(text: line + "\n") } catch { break }
            }
        }
        for await line in connection.lines() {
            handle(line)
        }
        cancelActive(confirm: false)
        outbound.finish()
        await writer.value
        let status = await connection.closeStatus
        log("session \(sessionID) closed: \(status.map { "\($0.code.rawValue)" } ?? "unknown")")
    }

    // MARK: Inbound

    private func handle(_ line: Data) {
        let command: ChannelCommand
        do {
            command = try ChannelCommand(line: line)
        } catch {
            send(.error(message: error.reason, type: "invalid_request_error", param: nil, code: "invalid_command"))
            return
        }
        switch command {
        case .message(let content, let model):
            if let retryAfter = limiter.take() {
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
                send(.error(message: "no pending permission request \(id)", type: "invalid_request_error",
                            param: "tool_use_id", code: "unknown_tool_use_id"))
                return
            }
            if decision == .alwaysAllow { alwaysAllowed.insert(entry.name) }
            entry.continuation.resume(returning: decision)
        }
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
        if active?.generation == generation { active = nil }
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
        for (_, entry) in waiting { entry.continuation.resume(returning: nil) }
        turn.task.cancel()
        if confirm {
            let d = ContinuousClock.now - turn.startedAt
            let ms = Int(d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000)
            send(.result(numTurns: turn.number, durationMs: ms, totalCostUsd: 0, subtype: .cancelled))
        }
    }

    // MARK: Outbound

    /// Session-level events (not tied to a turn).
    private func send(_ event: ChannelEvent) {
        outbound.yield(event.jsonLine)
    }

    /// Queues a turn's event line if its turn is still current.
    func emit(_ line: String, generation: UInt64) -> Bool {
        guard generation == self.generation else { return false }
        outbound.yield(line)
        return true
    }

    func requestPermission(toolUseId: String, name: String, input: JSONValue,
                           generation: UInt64) async -> PermissionDecision? {
        guard generation == self.generation else { return nil }
        if alwaysAllowed.contains(name) { return .alwaysAllow }
        outbound.yield(ChannelEvent.permissionRequest(toolUseId: toolUseId, name: name, input: input).jsonLine)
        return await withCheckedContinuation { continuation in
            if let old = pending.updateValue((name, continuation), forKey: toolUseId) {
                old.continuation.resume(returning: nil)
            }
        }
    }
}
