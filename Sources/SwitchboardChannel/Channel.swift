import Switchboard
import SwitchboardCore
import Foundation
import Logging

/// An open `/v1/ws` channel: typed events in, typed commands out.
///
/// Prefer ``withChannel(_:group:logger:isolation:_:)``, which always closes the socket. A `Channel`
/// made with ``connect(_:group:logger:)`` must be closed with ``close()``.
public actor Channel {
    /// Everything the server sends, one event per line, in order. Finishes when the
    /// connection closes; ``closeStatus`` and ``lastError`` say why. Single consumer.
    /// Cancelling the consuming task closes the connection (1001).
    public nonisolated let events: AsyncStream<ChannelEvent>
    /// Where this channel is connected (its description never contains the token).
    public nonisolated let endpoint: ChannelEndpoint
    private let adapter: SocketAdapter
    private var closed = false

    private init(endpoint: ChannelEndpoint, adapter: SocketAdapter, lines: AsyncStream<Data>) {
        self.endpoint = endpoint
        self.adapter = adapter
        let box = IteratorBox(lines.makeAsyncIterator())
        self.events = AsyncStream(unfolding: {
            guard let line = await box.next() else { return nil }
            return ChannelEvent(line: line)
        })
    }

    /// Opens the channel. Throws `SwitchboardError` (e.g. kind `.handshakeRejected` with
    /// `httpStatus` 401 for a bad token).
    ///
    /// - Parameters:
    ///   - endpoint: the server and session.
    ///   - group: the event loops to use (default: the process-wide shared group).
    ///   - logger: where the underlying `SocketAdapter` logs (default label
    ///     `switchboard.channel`; the session's token is never logged).
    public static func connect(_ endpoint: ChannelEndpoint, group: EventLoopGroup? = nil,
                               logger: Logger = Logger(label: "switchboard.channel")) async throws(SwitchboardError) -> Channel {
        let adapter = SocketAdapter(group: group, logger: logger)
        let lines = try await adapter.connect(to: endpoint)
        return Channel(endpoint: endpoint, adapter: adapter, lines: lines)
    }

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

/// The line iterator, driven only by the events stream's (serialized) unfolding closure.
private final class IteratorBox: @unchecked Sendable {
    // Safety: AsyncStream(unfolding:) never runs its closure concurrently with itself.
    private var iterator: AsyncStream<Data>.Iterator
    init(_ iterator: AsyncStream<Data>.Iterator) { self.iterator = iterator }
    func next() async -> Data? { await iterator.next() }
}

/// Opens a channel, runs `body`, and closes the socket however `body` ends: return, throw or
/// task cancellation. The close handshake is not interrupted by cancellation.
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
public func withChannel<T>(_ endpoint: ChannelEndpoint, group: EventLoopGroup? = nil,
                           logger: Logger = Logger(label: "switchboard.channel"),
                           isolation: isolated (any Actor)? = #isolation,
                           _ body: (Channel) async throws -> T) async throws -> T {
    let channel = try await Channel.connect(endpoint, group: group, logger: logger)
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
