import Switchboard
import SwitchboardCore
import Foundation
import Logging
import Synchronization

/// An open `/v1/ws` channel: typed events in, typed commands out.
///
/// Prefer ``withChannel(_:reconnect:group:logger:tokenProvider:isolation:_:)``, which always closes the socket. A `Channel`
/// made with ``connect(_:reconnect:group:logger:tokenProvider:)`` must be closed with ``close()``.
public actor Channel {
    /// Everything the server sends, one event per line, in order. Finishes when the
    /// connection closes (for good, with a reconnect policy); ``closeStatus`` and ``lastError``
    /// say why. Single consumer. Cancelling the consuming task closes the connection (1001).
    ///
    /// With a reconnect policy, events the server replays after a reconnection that this
    /// stream already delivered are dropped (by their `seq`), so each event comes once, in
    /// order; a pending ``ChannelEvent/permissionRequest(toolUseId:name:input:)``, which the
    /// server sends again on purpose, is the exception: answer it again (the server ignores a
    /// second answer).
    public nonisolated let events: AsyncStream<ChannelEvent>
    /// Where this channel is connected (its description never contains the token).
    public nonisolated let endpoint: ChannelEndpoint
    private let adapter: SocketAdapter
    private let position: SequencePosition
    private var closed = false

    private init(endpoint: ChannelEndpoint, adapter: SocketAdapter, lines: AsyncStream<Data>, position: SequencePosition) {
        self.endpoint = endpoint
        self.adapter = adapter
        self.position = position
        let box = IteratorBox(lines.makeAsyncIterator())
        self.events = AsyncStream(unfolding: {
            while true {
                guard let line = await box.next() else { return nil }
                let (event, sequence) = ChannelEvent.decodeSequenced(line)
                guard let sequence else { return event }
                switch event {
                case .resumeFailed:
                    // The numbering may start over (a new session): the position follows it.
                    position.set(sequence)
                    return event
                case .permissionRequest:
                    position.advance(to: sequence)
                    return event
                default:
                    if position.advance(to: sequence) { return event }
                }
            }
        })
    }

    /// Opens the channel. Throws `SwitchboardError` (e.g. kind `.handshakeRejected` with
    /// `httpStatus` 401 for a bad token, 403 for a session opened with another token).
    ///
    /// With a `reconnect` policy, a connection lost for a transient reason is re-opened with
    /// backoff and the session resumed: each attempt sends `last_seq`, the `seq` of the last
    /// event ``events`` delivered (0 when none was: the session from its start, so events sent
    /// while a first connection was being lost are not skipped), and the server replays what
    /// came after it (or answers ``ChannelEvent/resumeFailed(reason:)``). A turn keeps running
    /// on the server meanwhile, for its grace period. Commands sent while disconnected follow the policy's
    /// `ReconnectPolicy.whileDisconnected`; give `message` commands an `id` to send them again
    /// safely. A close with 1008 (another connection took the session over) is not retried.
    ///
    /// - Parameters:
    ///   - endpoint: the server and session (its ``ChannelEndpoint/lastSequence`` is sent on
    ///     the first attempt).
    ///   - reconnect: when to reconnect (default `ReconnectPolicy.never`).
    ///   - group: the event loops to use (default: the process-wide shared group).
    ///   - logger: where the underlying `SocketAdapter` logs (default label
    ///     `switchboard.channel`; the session's token is never logged).
    ///   - tokenProvider: for servers that verify expiring tokens (JWTs): asked for a token
    ///     before every connect attempt (it replaces the endpoint's token on the upgrade, as
    ///     `Authorization: Bearer`) and again at 80% of the token's lifetime, when the channel
    ///     sends the refresh command `{"type":"refresh","data":{"token":"…"}}`
    ///     (``ChannelCommand/refreshLine(token:)``) and the server answers with
    ///     ``ChannelEvent/refreshed(expiresAt:)``. A connection closed with 4001 (token expired)
    ///     or refused with `401` is retried per `reconnect` with a new token; a provider that
    ///     throws ends the channel with its error. Default nil: the endpoint's token, and
    ///     4001 / 401 are final.
    public static func connect(_ endpoint: ChannelEndpoint, reconnect: ReconnectPolicy = .never,
                               group: EventLoopGroup? = nil,
                               logger: Logger = Logger(label: "switchboard.channel"),
                               tokenProvider: (@Sendable () async throws -> SocketToken)? = nil) async throws(SwitchboardError) -> Channel {
        var refresh: (@Sendable (SocketToken) -> String)?
        if tokenProvider != nil {
            refresh = { (token: SocketToken) -> String in ChannelCommand.refreshLine(token: token.value) }
        }
        let adapter = SocketAdapter(group: group, reconnect: reconnect, logger: logger, tokenProvider: tokenProvider,
                                    refreshCommand: refresh)
        let position = SequencePosition(endpoint.lastSequence)
        let lines = try await adapter.connect(resolving: { () throws(SwitchboardError) -> any SocketEndpoint in
            var current = endpoint
            current.lastSequence = position.nextAttempt()
            return current
        })
        return Channel(endpoint: endpoint, adapter: adapter, lines: lines, position: position)
    }

    /// The `seq` of the newest event ``events`` delivered (nil before the first numbered one):
    /// where a later connection resumes (``ChannelEndpoint/lastSequence``).
    public nonisolated var lastSequence: UInt64? { position.value }

    /// Sends one command line. Throws `SwitchboardError` `.notConnected` once closed.
    public func send(_ command: ChannelCommand) async throws(SwitchboardError) {
        try await adapter.send(command: command)
    }

    /// Closes the connection (1000) and waits for the close handshake (bounded by the
    /// configured close timeout). Idempotent.
    public func close() async {
        closed = true
        await adapter.close()
    }

    /// Whether ``close()`` was called or the connection ended.
    public var isClosed: Bool {
        get async {
            if closed { return true }
            guard let c = await adapter.currentConnection else { return true }
            return await !c.isOpen
        }
    }

    /// Why the connection ended (nil while open).
    public var closeStatus: WebSocketCloseStatus? { get async { await adapter.closeStatus } }

    /// The error that ended the connection, if any.
    public var lastError: SwitchboardError? { get async { await adapter.lastError } }
}

extension Channel: CustomStringConvertible {
    /// `Channel(<redacted URL>)`: the endpoint's URL with secret-looking query values redacted and no headers.
    public nonisolated var description: String { "Channel(\(endpoint.redactedURL))" }
}

/// The `seq` of the newest event delivered, shared with the reconnection's endpoint maker.
private final class SequencePosition: Sendable {
    private struct State {
        var value: UInt64?
        var attempts = 0
    }
    private let state: Mutex<State>
    init(_ initial: UInt64?) { state = Mutex(State(value: initial)) }
    var value: UInt64? { state.withLock { $0.value } }
    /// The `last_seq` of the next connection attempt. The first is the endpoint's (nil: a new
    /// session, or the live stream of one). A reconnection follows a connection that was open
    /// (a failed first attempt ends `connect`): with no event delivered it asks for the session
    /// from its start, never for the live stream only, which would skip what the session sent
    /// while that connection was being lost.
    func nextAttempt() -> UInt64? {
        state.withLock { s in
            defer { s.attempts += 1 }
            return s.attempts == 0 ? s.value : (s.value ?? 0)
        }
    }
    /// Moves to `sequence` if it is newer; false for an event delivered already.
    @discardableResult
    func advance(to sequence: UInt64) -> Bool {
        state.withLock { s in
            if let c = s.value, sequence <= c { return false }
            s.value = sequence
            return true
        }
    }
    func set(_ sequence: UInt64) { state.withLock { $0.value = sequence } }
}

/// The line iterator, driven only by the events stream's (serialized) unfolding closure.
private final class IteratorBox: @unchecked Sendable {
    // Safety: AsyncStream(unfolding:) never runs its closure concurrently with itself.
    private var iterator: AsyncStream<Data>.Iterator
    init(_ iterator: AsyncStream<Data>.Iterator) { self.iterator = iterator }
    func next() async -> Data? { await iterator.next() }
}

/// Opens a channel (reconnecting and resuming the session per `reconnect`, and refreshing its
/// token in-band with `tokenProvider`, see ``Channel/connect(_:reconnect:group:logger:tokenProvider:)``),
/// runs `body`, and closes the socket however `body` ends: return, throw or task cancellation.
/// The close handshake is not interrupted by cancellation.
///
/// ```swift
/// let answer = try await withChannel(endpoint) { channel in
///     try await channel.send(.message(content: "hello"))
///     var text = ""
///     for await event in channel.events {
///         if case .partial(let t) = event { text += t }
///         if case .result = event { break }
///     }
///     return text
/// }
/// ```
public func withChannel<T>(_ endpoint: ChannelEndpoint, reconnect: ReconnectPolicy = .never,
                           group: EventLoopGroup? = nil,
                           logger: Logger = Logger(label: "switchboard.channel"),
                           tokenProvider: (@Sendable () async throws -> SocketToken)? = nil,
                           isolation: isolated (any Actor)? = #isolation,
                           _ body: (Channel) async throws -> T) async throws -> T {
    let channel = try await Channel.connect(endpoint, reconnect: reconnect, group: group, logger: logger,
                                            tokenProvider: tokenProvider)
    let result: Result<T, any Error>
    do {
        result = .success(try await body(channel))
    } catch {
        result = .failure(error)
    }
    // An unstructured task so a cancelled caller still completes the close handshake.
    await Task { await channel.close() }.value
    return try result.get()
}
