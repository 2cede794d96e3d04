import Foundation
import SwitchboardCore

/// The client: one WebSocket connection at a time, received data as an `AsyncStream<Data>` of
/// lines, typed commands out.
///
/// ```swift
/// let socket = SocketAdapter()
/// let lines = try await socket.connect(to: ChatEndpoint.local)
/// try await socket.send(command: ChatCommand.join(room: "general", user: "alice"))
/// for await line in lines { print(String(decoding: line, as: UTF8.self)) }
/// print(await socket.closeReason ?? "closed")
/// ```
///
/// The stream finishes when the connection closes, fails, or the consuming task is cancelled;
/// ``closeStatus`` and ``lastError`` say why. `send` before `connect` or after the end throws
/// ``SwitchboardError`` of kind `.notConnected`.
public actor SocketAdapter: SocketClient {
    private let group: EventLoopGroup?
    private var connection: WebSocketConnection?
    private var ended: (status: WebSocketCloseStatus?, error: SwitchboardError?)?

    /// - Parameter group: the event loops to use (default: the process-wide shared group).
    public init(group: EventLoopGroup? = nil) {
        self.group = group
    }

    /// Opens the connection and returns its lines (split on `\n` / `\r\n`, one element per
    /// line, lines may span messages). Closes any previous connection first.
    public func connect(to endpoint: some SocketEndpoint) async throws(SwitchboardError) -> AsyncStream<Data> {
        let connection = try await open(endpoint)
        return connection.lines()
    }

    /// Opens the connection and returns whole messages instead of lines.
    public func connectMessages(to endpoint: some SocketEndpoint) async throws(SwitchboardError) -> AsyncStream<WebSocketMessage> {
        let connection = try await open(endpoint)
        return connection.messages()
    }

    private func open(_ endpoint: some SocketEndpoint) async throws(SwitchboardError) -> WebSocketConnection {
        if let old = connection {
            connection = nil
            await old.close()
        }
        ended = nil
        let options = try endpoint.clientOptions()
        let group: EventLoopGroup
        if let g = self.group {
            group = g
        } else {
            do { group = try EventLoopGroup.shared } catch { throw .io(error) }
        }
        do {
            let c = try await ClientConnector.connect(options, group: group)
            connection = c
            return c
        } catch let e as SwitchboardError {
            ended = (nil, e)
            throw e
        } catch is CancellationError {
            throw .cancelled
        } catch {
            throw .handshakeFailed("\(error)")
        }
    }

    /// The open connection, for the message-level API (`send(binary:)`, `messages()`, …).
    public var currentConnection: WebSocketConnection? { connection }

    /// Sends the command's text plus a trailing newline (if absent) as one text message.
    public func send(command: some SocketCommand) async throws(SwitchboardError) {
        try await send(text: command.line)
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
    public func ping(_ payload: [UInt8] = []) async throws(SwitchboardError) {
        try await requireConnection().ping(payload)
    }

    /// Starts the close handshake and waits for it (bounded by the close timeout). Idempotent.
    public func close(code: WebSocketCloseCode = .normalClosure, reason: String = "") async {
        guard let c = connection else { return }
        await c.close(code: code, reason: reason)
        await remember(c)
    }

    public func disconnect() async {
        await close()
    }

    private func requireConnection() async throws(SwitchboardError) -> WebSocketConnection {
        guard let c = connection else { throw .notConnected }
        if await !c.isOpen {
            await remember(c)
            throw .notConnected
        }
        return c
    }

    private func remember(_ c: WebSocketConnection) async {
        ended = (await c.closeStatus, await c.error)
        if connection === c { connection = nil }
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
}
