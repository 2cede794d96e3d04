import Foundation
import Logging
import SwitchboardCore

/// The client: one WebSocket connection at a time, received data as an `AsyncStream<Data>` of
/// lines, typed commands out, and optional automatic reconnection.
///
/// ```swift
/// let socket = SocketAdapter()
/// let lines = try await socket.connect(to: ChatEndpoint.local)
/// try await socket.send(command: ChatCommand.join(room: "general", user: "alice"))
/// for await line in lines { print(String(decoding: line, as: UTF8.self)) }
/// print(await socket.closeStatus as Any)
/// ```
///
/// The stream finishes when the connection closes or fails (for good, when reconnecting), or
/// when the consuming task is cancelled (the connection is then closed with 1001);
/// ``closeStatus`` and ``lastError`` say why. `send` before `connect` or after the end throws
/// ``SwitchboardError`` of kind `.notConnected`.
///
/// With a ``ReconnectPolicy``, a connection lost for a transient reason is re-opened with
/// backoff; the stream does not finish in between, ``onReconnect(_:)`` re-sends set-up commands,
/// and ``states`` reports each transition. A connection that ends within
/// ``ReconnectPolicy/stableAfter`` of its handshake does not end the outage: the backoff keeps
/// growing. Commands accepted by ``send(command:)`` and not yet handed to a connection when it
/// ends are sent first on the next one; if there is no next one, they are in
/// ``undeliveredCommands``.
///
/// With a `tokenProvider` (``init(group:reconnect:logger:tokenProvider:refreshCommand:)``),
/// every connect attempt carries a fresh bearer token, and a `refreshCommand` hands the server
/// a new one in-band at 80% of each token's lifetime, so a server that closes expired
/// connections (4001, `WebSocketCloseCode.tokenExpired`) never has to; see
/// <doc:TokenExpiry>.
public actor SocketAdapter: SocketClient {
    let group: EventLoopGroup?
    /// Reconnection policy; ``ReconnectPolicy/never`` (the default) means the stream ends with
    /// the connection.
    public nonisolated let reconnectPolicy: ReconnectPolicy
    /// What the adapter, its connector and its connections log through (`connection` ids in
    /// metadata; query secrets redacted, headers never logged).
    public nonisolated let logger: Logger
    /// Shared by this adapter's connections: the logger they use, without a copy each.
    nonisolated let counters: ConnectionCounters
    /// Makes the options of each attempt: the endpoint is asked anew every time, so a request
    /// target that depends on state (a resume position in the query) is current on reconnect.
    var makeOptions: (@Sendable () async throws(SwitchboardError) -> WebSocketClientOptions)?
    /// The open connection. ``send(command:)``'s quick way to it (``outbox``) is opened
    /// separately, once the commands queued during an outage went out first.
    var connection: WebSocketConnection?
    /// Connections that ended while they still held lines or messages the stream had not
    /// taken (their close reply waited its grace for a reader, then went): read, oldest first,
    /// before the current connection, so nothing received is lost and the order holds. At most
    /// ``maxUnreadEndedConnections``; beyond, the oldest is dropped (logged).
    var unreadEnded: [WebSocketConnection] = []
    /// See ``unreadEnded``.
    static let maxUnreadEndedConnections = 16
    /// Commands on their way to the connection's loop (see ``send(command:)``).
    nonisolated let outbox = Locked(CommandOutbox<WebSocketConnection>())
    var ended: (status: WebSocketCloseStatus?, error: SwitchboardError?)?
    var reconnecting = false
    var userClosed = false
    var replacementWaiters: [CheckedContinuation<Void, Never>] = []
    var reconnectHook: (@Sendable (SocketAdapter) async throws -> Void)?
    /// Commands for the next connection, oldest first: those `send` queued during an outage
    /// (bounded by ``DisconnectedSendPolicy/queue(maxCommands:)``), after those a lost
    /// connection never took (bounded by `CommandOutbox.limit` bytes and that same count).
    var queuedCommands: [String] = []
    /// Attempts made in the current outage: reset only by a connection that stayed up for
    /// ``ReconnectPolicy/stableAfter``.
    var outageAttempts = 0
    /// When the current connection completed its handshake.
    var connectedAt: ContinuousClock.Instant?
    /// The reconnected connection whose `onReconnect` hook and queued commands go first:
    /// other senders wait (``replayWaiters``) so as not to overtake them.
    var replayingConnection: WebSocketConnection?
    var replayWaiters: [CheckedContinuation<Void, Never>] = []
    /// Queued commands are being written to the new connection; its end waits for that.
    var flushing = false
    var flushWaiters: [CheckedContinuation<Void, Never>] = []
    /// Set while the `onReconnect` hook runs: its sends go before the queued commands.
    @TaskLocal static var inReconnectHook = false
    var reconnectTask: Task<Void, Never>?
    /// Asked for a bearer token before each connect attempt and for each refresh (see
    /// ``init(group:reconnect:logger:tokenProvider:refreshCommand:)``).
    nonisolated let tokenProvider: (@Sendable () async throws -> SocketToken)?
    /// Builds the in-band refresh command from a new token; nil sends none.
    nonisolated let refreshCommand: (@Sendable (SocketToken) -> String)?
    /// The provider's latest token and when it was obtained (the start of its lifetime).
    var token: (value: SocketToken, obtained: Date)?
    /// Refreshes the token on the open connection (SocketAdapter+Tokens.swift).
    var refreshTask: Task<Void, Never>?
    var rng = SecureRandom()
    let stateContinuation: AsyncStream<SocketConnectionState>.Continuation

    /// Every state transition (`connecting`, `connected`, `reconnecting`, `closed`). Keeps the
    /// newest 256 if nobody reads it.
    public nonisolated let states: AsyncStream<SocketConnectionState>

    /// The commands accepted by ``send(command:)`` that no connection took, in order, once the
    /// adapter has ended (reconnection gave up, the policy does not reconnect, or ``close(code:reason:)``
    /// during an outage); empty while it runs, and again after the next `connect`.
    ///
    /// These are the commands queued during an outage
    /// (``DisconnectedSendPolicy/queue(maxCommands:)``) and those accepted just as a connection
    /// ended, before its event loop handed them to the socket. A command handed to a socket that
    /// then failed is not here: like any bytes in flight, the peer may or may not have received
    /// it. Read it after the stream finished; the count (never the text) is logged as a warning.
    public internal(set) var undeliveredCommands: [String] = []

    /// - Parameters:
    ///   - group: the event loops to use (default: the process-wide shared group).
    ///   - reconnect: opt-in automatic reconnection (default: ``ReconnectPolicy/never``).
    ///   - logger: where connects, reconnects and closes are logged (default label
    ///     `switchboard.client`; debug level for connects and closes, info for reconnects).
    ///   - tokenProvider: asked for a bearer token before every connect attempt (the first and
    ///     each reconnection); the token goes on the upgrade request as `Authorization: Bearer`,
    ///     replacing one the endpoint set. Asked again at 80% of a token's lifetime (from when
    ///     it was obtained to ``SocketToken/expiresAt``) while connected, for the in-band
    ///     refresh. With a provider, a close with `WebSocketCloseCode.tokenExpired` (4001) or
    ///     a handshake `401` is retried (per `reconnect`) once the provider returned a new
    ///     token; a provider that throws ends the adapter with that error. Default nil: the
    ///     endpoint's own headers, and 4001 / 401 are final.
    ///   - refreshCommand: builds the command line that hands a refreshed token to the server on
    ///     the open connection (e.g. `{"type":"refresh","token":"…"}`); sent like
    ///     ``send(command:)`` (newline added). Default nil: nothing is sent mid-connection, the
    ///     refreshed token is used by the next connect.
    public init(group: EventLoopGroup? = nil, reconnect: ReconnectPolicy = .never,
                logger: Logger = Logger(label: "switchboard.client"),
                tokenProvider: (@Sendable () async throws -> SocketToken)? = nil,
                refreshCommand: (@Sendable (SocketToken) -> String)? = nil) {
        self.group = group
        self.reconnectPolicy = reconnect
        self.logger = logger
        self.tokenProvider = tokenProvider
        self.refreshCommand = refreshCommand
        self.counters = ConnectionCounters(logger: logger)
        (states, stateContinuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(256))
    }

    deinit {
        stateContinuation.finish()
    }

    // MARK: Connecting

    /// Opens the connection and returns its lines (split on `\n` / `\r\n`, one element per
    /// line, lines may span messages). Closes any previous connection first. Throws if the
    /// first attempt fails (reconnection applies to connections lost later).
    ///
    /// The endpoint's properties are read again before every reconnection attempt (a type whose
    /// `queryItems` reads shared state gets its current value); to hand over a new endpoint
    /// value each time, use ``connect(resolving:)``.
    public func connect(to endpoint: some SocketEndpoint) async throws(SwitchboardError) -> AsyncStream<Data> {
        try await connect(resolving: { endpoint })
    }

    /// Like ``connect(to:)``, with the endpoint made by `endpoint` before the first attempt and
    /// before every reconnection attempt: the place to put what must change between attempts,
    /// such as the position to resume from (`last_seq`, `since`) in the query. An error thrown
    /// there ends the connection (first attempt) or the reconnection, like a refused connect.
    public func connect(resolving endpoint: @escaping @Sendable () async throws(SwitchboardError) -> any SocketEndpoint) async throws(SwitchboardError) -> AsyncStream<Data> {
        let buffer = try await connectLines(resolving: endpoint).buffer
        // SocketLines' steps inlined: the stream's own cancellation handler closes the connection.
        return AsyncStream(unfolding: { [self] in
            if let line = buffer.pop() { return line }
            return await buffer.refill { await self.nextLines() }
        },
                           onCancel: { [self] in Task { await self.close(code: .goingAway) } })
    }

    /// Like ``connect(to:)``, with the lines as a ``SocketLines`` sequence instead of an
    /// `AsyncStream`: the same lines and ending, without the stream's cost per line (a step of
    /// the stream, and two thread switches per line when the loop runs on an actor such as the
    /// main actor). The choice for many small lines, or for a loop on an actor.
    public func connectLines(to endpoint: some SocketEndpoint) async throws(SwitchboardError) -> SocketLines {
        try await connectLines(resolving: { endpoint })
    }

    /// Like ``connect(resolving:)``, with the lines as a ``SocketLines`` sequence (see
    /// ``connectLines(to:)``).
    public func connectLines(resolving endpoint: @escaping @Sendable () async throws(SwitchboardError) -> any SocketEndpoint) async throws(SwitchboardError) -> SocketLines {
        try await start(endpoint)
        return SocketLines(adapter: self, buffer: LineBatchBuffer())
    }

    /// Opens the connection and returns whole messages instead of lines.
    public func connectMessages(to endpoint: some SocketEndpoint) async throws(SwitchboardError) -> AsyncStream<WebSocketMessage> {
        try await connectMessages(resolving: { endpoint })
    }

    /// Like ``connectMessages(to:)``, with the endpoint made anew before every attempt (see
    /// ``connect(resolving:)``).
    public func connectMessages(resolving endpoint: @escaping @Sendable () async throws(SwitchboardError) -> any SocketEndpoint) async throws(SwitchboardError) -> AsyncStream<WebSocketMessage> {
        try await start(endpoint)
        return AsyncStream(unfolding: { [self] in await self.nextMessage() },
                           onCancel: { [self] in Task { await self.close(code: .goingAway) } })
    }

    /// Runs `hook` after every successful reconnection, before queued commands are flushed:
    /// the place to re-send set-up commands (join a room, subscribe, authenticate).
    public func onReconnect(_ hook: @escaping @Sendable (SocketAdapter) async throws -> Void) {
        reconnectHook = hook
    }

    func start(_ endpoint: @escaping @Sendable () async throws(SwitchboardError) -> any SocketEndpoint) async throws(SwitchboardError) {
        outbox.withLock { $0.connectionChanged(to: nil) }
        unreadEnded = []
        if let old = connection {
            connection = nil
            await old.close()
        }
        reconnectTask?.cancel()
        reconnectTask = nil
        stopRefreshing()
        userClosed = false
        ended = nil
        queuedCommands = []
        undeliveredCommands = []
        outageAttempts = 0
        _ = outbox.withLock { $0.takeStranded() }
        let makeOptions: @Sendable () async throws(SwitchboardError) -> WebSocketClientOptions = {
            () async throws(SwitchboardError) in try await endpoint().clientOptions()
        }
        self.makeOptions = makeOptions
        stateContinuation.yield(.connecting)
        do {
            try await install(open(attemptOptions(makeOptions)), acceptingCommands: true)
        } catch {
            ended = (nil, error)
            stateContinuation.yield(.closed(code: nil, reason: "", error: error))
            throw error
        }
        stateContinuation.yield(.connected)
    }

    func open(_ options: WebSocketClientOptions) async throws(SwitchboardError) -> WebSocketConnection {
        let group: EventLoopGroup
        if let g = self.group {
            group = g
        } else {
            do { group = try EventLoopGroup.shared } catch { throw .io(error) }
        }
        do {
            return try await ClientConnector.connect(options, group: group, counters: counters)
        } catch let e as SwitchboardError {
            throw e
        } catch is CancellationError {
            throw .cancelled
        } catch {
            throw .handshakeFailed("\(error)")
        }
    }

    /// Makes `c` the connection; `acceptingCommands` opens ``send(command:)``'s quick way to it
    /// (a reconnection opens it after the queued commands).
    func install(_ c: WebSocketConnection, acceptingCommands: Bool) async {
        connection = c
        connectedAt = .now
        if acceptingCommands { outbox.withLock { $0.connectionChanged(to: c) } }
        await c.onClose { [weak self] _ in
            Task { await self?.connectionEnded(c) }
        }
        startRefreshing(on: c)
    }

    // MARK: Receiving

    /// The next lines of the current connection, in batches (``WebSocketConnection/nextLines()``),
    /// after those of the connections that ended before the stream took everything they held.
    func nextLines() async -> [Data]? {
        while let old = unreadEnded.first {
            if let lines = await old.nextLines() { return lines }
            if unreadEnded.first === old { unreadEnded.removeFirst() }
        }
        while let c = await currentOrNextConnection() {
            if let lines = await c.nextLines() { return lines }
            guard await waitForReplacement(of: c) else { return nil }
        }
        return nil
    }

    func nextMessage() async -> WebSocketMessage? {
        while let old = unreadEnded.first {
            if let m = try? await old.receive() { return m }
            if unreadEnded.first === old { unreadEnded.removeFirst() }
        }
        while let c = await currentOrNextConnection() {
            if let m = try? await c.receive() { return m }
            guard await waitForReplacement(of: c) else { return nil }
        }
        return nil
    }

    /// The open connection, waiting through a reconnection in progress; nil once given up.
    func currentOrNextConnection() async -> WebSocketConnection? {
        while connection == nil && reconnecting {
            await withCheckedContinuation { replacementWaiters.append($0) }
        }
        return connection
    }

    /// After `c` ended: waits until the adapter has a new connection (true) or has given up (false).
    func waitForReplacement(of c: WebSocketConnection) async -> Bool {
        while connection === c || (connection == nil && reconnecting) {
            await withCheckedContinuation { replacementWaiters.append($0) }
        }
        return connection != nil
    }

    func wakeReplacementWaiters() {
        let w = replacementWaiters
        replacementWaiters = []
        for c in w { c.resume() }
    }

    // MARK: Sending

    /// The open connection, for the message-level API (`send(binary:)`, `messages()`, …).
    public var currentConnection: WebSocketConnection? { connection }

    /// Sends the command's text plus a trailing newline (if absent) as one text message.
    /// While a reconnecting adapter is disconnected: see ``DisconnectedSendPolicy``.
    ///
    /// Commands sent while the connection keeps up cost no executor hop each: they are handed
    /// to the connection's event loop in batches (one wake-up for all the commands sent before
    /// the loop gets to them), in order. While the connection's outbound queue is above its
    /// high-water mark, or more than 256 KiB (`CommandOutbox.limit`) bytes of commands wait for the
    /// loop, `send` waits for room instead, as ``WebSocketConnection/send(text:compress:)`` does. A
    /// command accepted just as the connection closes, before its loop handed it to the socket,
    /// is sent first on the next connection (when reconnecting) or reported in
    /// ``undeliveredCommands``; one already handed to the socket is lost with it if the peer did
    /// not read it, like any bytes in flight. After a reconnect, `send` waits until the
    /// ``onReconnect(_:)`` hook ran and the commands queued during the outage were sent.
    ///
    /// `send` runs on the caller's executor (it is `nonisolated(nonsending)`): a loop on the
    /// main actor or on another actor does not hop to send a command while the quick way is open.
    public nonisolated(nonsending) func send(command: some SocketCommand) async throws(SwitchboardError) {
        let line = command.line
        switch outbox.withLock({ $0.offer(line) }) {
        case .queued:
            return
        case .queuedAndWake(let connection):
            connection.loop.execute { [outbox] in
                let batch = outbox.withLock { $0.takeBatch() }
                connection.assumeIsolated { c in
                    // Closed before this job ran: nothing of the batch was sent. The adapter
                    // sends it first on the next connection, or reports it.
                    guard c.isOpen else {
                        outbox.withLock { $0.strand(batch) }
                        return
                    }
                    let writable = c.queueTexts(batch)
                    outbox.withLock { $0.drained(writable: writable) }
                }
            }
        case .refused:
            try await sendWaitingForRoom(line)
        }
    }

    func sendWaitingForRoom(_ line: String) async throws(SwitchboardError) {
        // After a reconnect, the hook's commands and then the queued ones go first.
        while replayingConnection != nil, !Self.inReconnectHook {
            await withCheckedContinuation { replayWaiters.append($0) }
        }
        // A connection that just ended: once the adapter decided what follows (reconnect or
        // not), the command is queued or refused accordingly, not refused meanwhile.
        if reconnectPolicy.reconnects, let c = connection, await !c.isOpen {
            while connection === c { await withCheckedContinuation { replacementWaiters.append($0) } }
        }
        if connection == nil, reconnecting, case .queue(let max) = reconnectPolicy.whileDisconnected {
            guard queuedCommands.count < max else {
                throw .limitExceeded("\(max) commands already queued while reconnecting", closeCode: .tryAgainLater)
            }
            queuedCommands.append(line)
            return
        }
        try await send(text: line)
        // `send(text:)` returned, so there was room: commands may take the quick way again.
        outbox.withLock { $0.drained(writable: true) }
    }

    /// Sends a text message as is.
    public func send(text: String) async throws(SwitchboardError) {
        try await requireConnection().send(text: text)
    }

    /// Sends a binary message.
    public func send(binary: Data) async throws(SwitchboardError) {
        try await requireConnection().send(binary: binary)
    }

    /// Sends a ping.
    public func ping(_ payload: Data = Data()) async throws(SwitchboardError) {
        try await requireConnection().ping(payload)
    }

    func requireConnection() async throws(SwitchboardError) -> WebSocketConnection {
        guard let c = connection, await c.isOpen else { throw .notConnected }
        return c
    }

    // MARK: Closing

    /// Starts the close handshake and waits for it (bounded by the close timeout); stops any
    /// reconnection. Idempotent.
    public func close(code: WebSocketCloseCode = .normalClosure, reason: String = "") async {
        userClosed = true
        // From now on `send` takes the checked path, which throws.
        outbox.withLock { $0.connectionChanged(to: nil) }
        reconnectTask?.cancel()
        stopRefreshing()
        guard let c = connection else {
            if reconnecting { finish(status: ended?.status, error: ended?.error) }
            return
        }
        await c.close(code: code, reason: reason)
        ended = (await c.closeStatus, await c.error)
    }

    /// The same as ``close(code:reason:)`` with 1000 (the ``SocketClient`` requirement).
    public func disconnect() async {
        await close()
    }

    /// Why the last connection ended: close code and reason (nil while connected or never connected).
    public var closeStatus: WebSocketCloseStatus? {
        get async {
            if let c = connection { return await c.closeStatus }
            return ended?.status
        }
    }

    /// The error that ended the last connection or connect attempt, if any.
    public var lastError: SwitchboardError? {
        get async {
            if let c = connection { return await c.error }
            return ended?.error
        }
    }

    /// Round-trip time of the last keepalive ping, if one has been answered.
    public var lastPingRoundTrip: Duration? {
        get async { await connection?.lastPingRoundTrip }
    }
}
