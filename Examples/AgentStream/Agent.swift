import Foundation
import SwitchboardChannel

/// Runs one turn: emits events through `turn` until done. Throwing `CancellationError` (or
/// returning) after cancellation is the normal way out of a cancelled turn.
protocol Agent: Sendable {
    func run(prompt: String, model: String?, turn: TurnContext) async throws
}

/// What a running turn may do. Every method is a no-op once the turn is stale (cancelled or
/// pre-empted by a newer message): the session's generation counter is checked before each send.
struct TurnContext: Sendable {
    let session: AgentSession
    let generation: UInt64
    /// 1-based number of this turn in the session.
    let number: Int
    let startedAt: ContinuousClock.Instant

    /// Sends an event; throws `CancellationError` if the turn is no longer current.
    func emit(_ event: ChannelEvent) async throws {
        try await emit(line: event.jsonLine)
    }

    /// Sends a raw event line (already JSON); throws `CancellationError` if the turn is stale.
    func emit(line: String) async throws {
        guard await session.emit(line, generation: generation) else { throw CancellationError() }
    }

    /// Asks the client (unless the tool is always allowed in this session). Nil: the turn was
    /// cancelled while waiting.
    func requestPermission(toolUseId: String, name: String, input: JSONValue) async -> PermissionDecision? {
        await session.requestPermission(toolUseId: toolUseId, name: name, input: input, generation: generation)
    }

    var elapsedMilliseconds: Int {
        let d = ContinuousClock.now - startedAt
        return Int(d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000)
    }
}
