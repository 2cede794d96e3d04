import ChatRoomCore
import Switchboard

/// Where a chat server keeps its rooms: who is in them, and their history. One process
/// (``LocalChatBackend``: SQLite) or every process sharing a Redis (``RedisChatBackend``).
protocol ChatBackend: Sendable {
    /// Adds `user` to `room` and subscribes `connection` to the room's topic; returns the
    /// presence list (join order), or `name_taken`. When it returns, the connection receives
    /// every event published to the room afterwards, from any process.
    func join(room: String, user: String, connection: WebSocketConnection) async -> Result<[String], ChatError>
    /// Removes `user` from `room` and unsubscribes `connection`.
    func leave(room: String, user: String, connection: WebSocketConnection) async
    /// Stores a message and broadcasts it to the room (persisted first, ids increasing, delivered
    /// in id order).
    func post(room: String, user: String, text: String) async throws -> ServerEvent.Message
    /// The room's last ``ChatLimits/historyCount`` messages, oldest first.
    func recent(room: String) async throws -> [ServerEvent.Message]
    /// Stops (closes the database or the Redis connections).
    func close() async
}

/// The single-process backend: presence in memory, history in SQLite.
struct LocalChatBackend: ChatBackend {
    let server: WebSocketServer
    let directory: RoomDirectory
    let store: HistoryStore

    func join(room: String, user: String, connection: WebSocketConnection) async -> Result<[String], ChatError> {
        await directory.join(room: room, user: user, connection: connection)
    }

    func leave(room: String, user: String, connection: WebSocketConnection) async {
        await directory.leave(room: room, user: user, connection: connection)
    }

    func post(room: String, user: String, text: String) async throws -> ServerEvent.Message {
        // Persist first: a broadcast message is never lost by a crash or restart.
        let stored = try await store.append(room: room, user: user, text: text, ts: EventStamp.nowMillis())
        await server.publish(text: ServerEvent.message(stored).line, to: RoomDirectory.topic(room))
        return stored
    }

    func recent(room: String) async throws -> [ServerEvent.Message] {
        try await store.recent(room: room)
    }

    func close() async { await store.close() }
}
