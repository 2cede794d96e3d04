import ChatRoomCore
import Switchboard

/// What a `join` claims of its name: the key of a new presence, and for a re-join the key that
/// takes over the name's presence when another connection holds it.
struct PresenceClaim: Sendable {
    /// Stored with the presence when the name is free (``RejoinKey/make()``).
    var newKey: String
    /// A re-join's `rejoinKey`: a presence of the name held by another connection is taken
    /// over only when its key is this one (compared in constant time). nil (a first join, a
    /// re-join without key): `name_taken`.
    var rejoinKey: String?
    /// The token subject joining (servers with tokens): a presence of the name held by another
    /// connection of the same subject is taken over without a key (the user's stale
    /// connection). nil: without tokens, only the key takes a name over.
    var owner: String? = nil
}

/// A successful join.
struct JoinedPresence: Sendable {
    /// The room's users, in join order.
    var users: [String]
    /// The name was present and taken over (a re-join): the others get no `join` event.
    var replaced: Bool
    /// The presence's key, for the joiner's `presence`: a take-over keeps the existing one, so
    /// a client that lost the answer to a re-join can still re-join with the key it has.
    var rejoinKey: String
}

/// One page of a room's history, for the `history` command and `GET /v1/rooms/{room}/messages`.
struct HistoryPage: Sendable {
    /// Oldest first.
    var messages: [ServerEvent.Message]
    /// The `before` of the next older page (the oldest id in ``messages``); nil when no older
    /// message is kept.
    var next: Int64?
}

extension HistoryPage {
    /// The page of `rows` (oldest first, up to `limit + 1` with an id below the page's
    /// `before`): the newest `limit` of them, fewer when their text passes
    /// ``ChatLimits/maxHistoryPageBytes`` (always one at least), with `next` set when rows
    /// older than the page's oldest exist.
    init(rows: [ServerEvent.Message], limit: Int) {
        let kept = Self.newestFitting(rows.suffix(limit))
        messages = kept
        next = rows.count > kept.count ? kept.first?.id : nil
    }

    /// The newest of `rows` (oldest first) whose names and texts, as JSON escapes them, take
    /// at most ``ChatLimits/maxHistoryPageBytes`` (one at least), oldest first: one `history`
    /// line stays below the 1 MiB line limit of Switchboard's clients.
    static func newestFitting(_ rows: some BidirectionalCollection<ServerEvent.Message>) -> [ServerEvent.Message] {
        var kept: [ServerEvent.Message] = []
        var bytes = 0
        for message in rows.reversed() {
            bytes += escapedSize(message.user) + escapedSize(message.text)
            if !kept.isEmpty && bytes > ChatLimits.maxHistoryPageBytes { break }
            kept.append(message)
        }
        kept.reverse()
        return kept
    }

    /// Bytes of `text` in JSON: control characters take up to six (`\u0001`), quotes and
    /// backslashes two.
    static func escapedSize(_ text: String) -> Int {
        var size = 0
        for byte in text.utf8 {
            size += byte < 0x20 ? 6 : (byte == 0x22 || byte == 0x5C ? 2 : 1)
        }
        return size
    }
}

/// Where a chat server keeps its rooms: who is in them, and their history. One process
/// (``LocalChatBackend``: SQLite) or every process sharing a Redis (``RedisChatBackend``).
protocol ChatBackend: Sendable {
    /// Adds `user` to `room` and subscribes `connection` to the room's topic; returns the
    /// presence list (join order), whether the name was already present (replaced) and the
    /// presence's key, or `name_taken`. A name held by another connection (a stale one, not
    /// noticed gone yet) is taken over only by a claim carrying its key. When it returns, the
    /// connection receives every event published to the room afterwards, from any process.
    func join(room: String, user: String, connection: WebSocketConnection,
              claim: PresenceClaim) async -> Result<JoinedPresence, ChatError>
    /// Removes `user` from `room` and unsubscribes `connection`; false when the name was no
    /// longer this connection's (taken over by a re-join, here or through another process):
    /// nobody left.
    func leave(room: String, user: String, connection: WebSocketConnection) async -> Bool
    /// Stores a message and broadcasts it to the room (persisted first, ids increasing, delivered
    /// in id order).
    func post(room: String, user: String, text: String) async throws -> ServerEvent.Message
    /// As ``post(room:user:text:)``, but a `clientID` (1 to ``ChatLimits/maxClientIDLength``
    /// characters, validated by the caller) already used in `room` within
    /// ``ChatLimits/clientIDWindow`` returns the message stored then: not stored or broadcast
    /// again (a retried request). nil: always a new message.
    func post(room: String, user: String, text: String, clientID: String?) async throws -> ServerEvent.Message
    /// Up to `limit` (1 to ``ChatLimits/maxHistoryPageSize``) of the room's messages with an id
    /// below `before` (nil: the newest), oldest first; ``HistoryPage/next`` is the `before` of
    /// the next older page, nil when none is kept.
    func history(room: String, before: Int64?, limit: Int) async throws -> HistoryPage
    /// The room's messages with an id above `id`, oldest first: the newest
    /// ``ChatLimits/resumeHistoryCount`` of them, fewer when their text passes
    /// ``ChatLimits/maxHistoryPageBytes`` (``HistoryPage/newestFitting(_:)``), and whether that
    /// is all of them (`complete`).
    func messages(room: String, after id: Int64) async throws -> (messages: [ServerEvent.Message], complete: Bool)
    /// Stops (closes the database or the Redis connections).
    func close() async
    /// Replicas that must acknowledge a message before its sender is told it is stored
    /// (`--redis-min-replicas-ack`, fixed at start-up); 0: the sender's echo is not held.
    var requiredReplicaAcks: Int { get }
    /// As ``post(room:user:text:clientID:)``, and whether the message was stored by an earlier
    /// post with the same client id (a retry: not broadcast again). With
    /// ``requiredReplicaAcks`` above 0, fails with `unavailable` (nothing stored) when the
    /// master has fewer replicas online.
    func postReportingRetry(room: String, user: String, text: String, clientID: String?) async throws -> PostOutcome
    /// Whether `message` is on the current master and acknowledged by ``requiredReplicaAcks``
    /// replicas within ``ReplicaAck/timeout`` (`WAIT`): false on timeout, when the master changed
    /// and the message is not there, or when Redis is unreachable.
    func waitForReplicas(of message: ServerEvent.Message) async -> Bool
}

/// A stored message, and whether an earlier post with the same client id stored it.
struct PostOutcome: Sendable {
    var message: ServerEvent.Message
    var isRetry: Bool
}

/// How long a sender's confirmation waits for the replicas (`WAIT`'s timeout).
enum ReplicaAck {
    /// Replication on a healthy network takes milliseconds; two seconds rides out a busy
    /// replica without holding a sender for long.
    static let timeout: Duration = .seconds(2)
}

/// The single-process backend: presence in memory, history in SQLite.
struct LocalChatBackend: ChatBackend {
    let server: WebSocketServer
    let directory: RoomDirectory
    let store: HistoryStore

    func join(room: String, user: String, connection: WebSocketConnection,
              claim: PresenceClaim) async -> Result<JoinedPresence, ChatError> {
        await directory.join(room: room, user: user, connection: connection, claim: claim)
    }

    func leave(room: String, user: String, connection: WebSocketConnection) async -> Bool {
        await directory.leave(room: room, user: user, connection: connection)
    }

    func post(room: String, user: String, text: String, clientID: String?) async throws -> ServerEvent.Message {
        // Persist first: a broadcast message is never lost by a crash or restart. Stored and
        // handed to the subscribers in one step of the store: broadcast in id order. A retry
        // (a known client id) is not handed on: it was broadcast the first time.
        let server = self.server
        return try await store.append(room: room, user: user, text: text, ts: EventStamp.nowMillis(),
                                      clientID: clientID) { stored in
            server.publishNow(.text(Array(ServerEvent.message(stored).line.utf8)), to: RoomDirectory.topic(room))
        }
    }

    func history(room: String, before: Int64?, limit: Int) async throws -> HistoryPage {
        let size = min(max(limit, 1), ChatLimits.maxHistoryPageSize)
        // One more than asked: whether an older page exists.
        let rows = try await store.messages(room: room, before: before, limit: size + 1)
        return HistoryPage(rows: rows, limit: size)
    }

    func messages(room: String, after id: Int64) async throws -> (messages: [ServerEvent.Message], complete: Bool) {
        let rows = try await store.messages(room: room, after: id, limit: ChatLimits.resumeHistoryCount + 1)
        let kept = HistoryPage.newestFitting(rows.suffix(ChatLimits.resumeHistoryCount))
        return (kept, kept.count == rows.count)
    }

    func close() async { await store.close() }
}

extension ChatBackend {
    /// A message with no client id: always stored and broadcast.
    func post(room: String, user: String, text: String) async throws -> ServerEvent.Message {
        try await post(room: room, user: user, text: text, clientID: nil)
    }

    /// No replicas to wait for.
    var requiredReplicaAcks: Int { 0 }

    /// The plain post, never reported as a retry (used only with ``requiredReplicaAcks`` 0).
    func postReportingRetry(room: String, user: String, text: String, clientID: String?) async throws -> PostOutcome {
        PostOutcome(message: try await post(room: room, user: user, text: text, clientID: clientID), isRetry: false)
    }

    /// Nothing to wait for: true.
    func waitForReplicas(of message: ServerEvent.Message) async -> Bool { true }
}
