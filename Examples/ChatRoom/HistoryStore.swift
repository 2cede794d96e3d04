import ChatRoomCore
import CSQLite
import Foundation

/// Message history in SQLite. Every write completes (and is durable: WAL, `synchronous=FULL`)
/// before the message is broadcast. The database handle lives inside this actor only.
actor HistoryStore {
    struct Failure: Error, CustomStringConvertible { var description: String }

    private let db: SQLiteDatabase

    init(path: String) throws {
        db = try SQLiteDatabase(path: path)
    }

    /// Stores a message, hands it to `then` in the same step (so what `then` does happens in id
    /// order), and returns it with its row id. With a `clientID` already recorded for `room`
    /// within ``ChatLimits/clientIDWindow`` (of `ts`), returns the message stored then instead,
    /// without storing anything or calling `then`; otherwise the message and its client id are
    /// stored in one transaction. Client ids older than the window are pruned here.
    func append(room: String, user: String, text: String, ts: Int64, clientID: String? = nil,
                then: (ServerEvent.Message) -> Void = { _ in }) throws -> ServerEvent.Message {
        guard let clientID else {
            let id = try db.insert(room: room, user: user, text: text, ts: ts)
            let stored = ServerEvent.Message(id: id, room: room, user: user, text: text, ts: ts)
            then(stored)
            return stored
        }
        let window = ChatLimits.clientIDWindow.components.seconds * 1000
        try db.exec("BEGIN IMMEDIATE")
        do {
            try db.pruneClientIDs(createdBefore: ts - window)
            if let earlier = try db.clientMessage(room: room, clientID: clientID) {
                try db.exec("COMMIT")
                return earlier
            }
            let id = try db.insert(room: room, user: user, text: text, ts: ts)
            try db.recordClientID(room: room, clientID: clientID, messageID: id, created: ts)
            try db.exec("COMMIT")
            let stored = ServerEvent.Message(id: id, room: room, user: user, text: text, ts: ts)
            then(stored)
            return stored
        } catch {
            try? db.exec("ROLLBACK")
            throw error
        }
    }

    /// The newest `limit` messages of `room` with an id above `id`, oldest first.
    func messages(room: String, after id: Int64, limit: Int) throws -> [ServerEvent.Message] {
        try db.messages(room: room, after: id, limit: limit)
    }

    /// The newest `limit` messages of `room` with an id below `before` (nil: any), oldest first.
    func messages(room: String, before: Int64?, limit: Int) throws -> [ServerEvent.Message] {
        guard let before else { return try db.recent(room: room, limit: limit) }
        return try db.messages(room: room, before: before, limit: limit)
    }

    /// The last `limit` messages of `room`, oldest first.
    func recent(room: String, limit: Int = ChatLimits.historyCount) throws -> [ServerEvent.Message] {
        try db.recent(room: room, limit: limit)
    }

    func close() { db.close() }
}

/// A thin wrapper of the sqlite3 C API. Not thread-safe: owned by ``HistoryStore``.
final class SQLiteDatabase {
    private var handle: OpaquePointer?
    private var insertStatement: OpaquePointer?
    private var recentStatement: OpaquePointer?
    private var afterStatement: OpaquePointer?
    private var beforeStatement: OpaquePointer?
    private var pruneStatement: OpaquePointer?
    private var clientLookupStatement: OpaquePointer?
    private var clientInsertStatement: OpaquePointer?
    /// `SQLITE_TRANSIENT`: SQLite copies bound strings.
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    init(path: String) throws {
        var h: OpaquePointer?
        let rc = sqlite3_open_v2(path, &h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nil)
        guard rc == SQLITE_OK, let h else {
            let message = h.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close(h)
            throw HistoryStore.Failure(description: "cannot open \(path): \(message)")
        }
        handle = h
        sqlite3_busy_timeout(h, 5000)
        try exec("PRAGMA journal_mode=WAL")
        try exec("PRAGMA synchronous=FULL")
        try exec("""
            CREATE TABLE IF NOT EXISTS messages(
                id INTEGER PRIMARY KEY, room TEXT NOT NULL, user TEXT NOT NULL, text TEXT NOT NULL, ts INTEGER NOT NULL)
            """)
        try exec("CREATE INDEX IF NOT EXISTS messages_room_id ON messages(room, id)")
        insertStatement = try prepare("INSERT INTO messages(room, user, text, ts) VALUES (?1, ?2, ?3, ?4)")
        recentStatement = try prepare("SELECT id, room, user, text, ts FROM messages WHERE room = ?1 ORDER BY id DESC LIMIT ?2")
        afterStatement = try prepare(
            "SELECT id, room, user, text, ts FROM messages WHERE room = ?1 AND id > ?3 ORDER BY id DESC LIMIT ?2")
        // Served by messages_room_id: a range scan backwards from `before`.
        beforeStatement = try prepare(
            "SELECT id, room, user, text, ts FROM messages WHERE room = ?1 AND id < ?3 ORDER BY id DESC LIMIT ?2")
        // Client ids of retried posts: one row per (room, id), pruned by age (`created`, ms).
        try exec("""
            CREATE TABLE IF NOT EXISTS client_ids(
                room TEXT NOT NULL, client_id TEXT NOT NULL, message_id INTEGER NOT NULL, created INTEGER NOT NULL,
                PRIMARY KEY(room, client_id))
            """)
        try exec("CREATE INDEX IF NOT EXISTS client_ids_created ON client_ids(created)")
        pruneStatement = try prepare("DELETE FROM client_ids WHERE created < ?1")
        clientLookupStatement = try prepare("""
            SELECT m.id, m.room, m.user, m.text, m.ts FROM client_ids c JOIN messages m ON m.id = c.message_id
            WHERE c.room = ?1 AND c.client_id = ?2
            """)
        clientInsertStatement = try prepare(
            "INSERT INTO client_ids(room, client_id, message_id, created) VALUES (?1, ?2, ?3, ?4)")
    }

    deinit { close() }

    func close() {
        sqlite3_finalize(insertStatement); insertStatement = nil
        sqlite3_finalize(recentStatement); recentStatement = nil
        sqlite3_finalize(afterStatement); afterStatement = nil
        sqlite3_finalize(beforeStatement); beforeStatement = nil
        sqlite3_finalize(pruneStatement); pruneStatement = nil
        sqlite3_finalize(clientLookupStatement); clientLookupStatement = nil
        sqlite3_finalize(clientInsertStatement); clientInsertStatement = nil
        if let h = handle { sqlite3_close_v2(h) }
        handle = nil
    }

    func insert(room: String, user: String, text: String, ts: Int64) throws -> Int64 {
        guard let h = handle, let s = insertStatement else { throw HistoryStore.Failure(description: "database closed") }
        defer { sqlite3_reset(s); sqlite3_clear_bindings(s) }
        try bind(room, at: 1, in: s)
        try bind(user, at: 2, in: s)
        try bind(text, at: 3, in: s)
        sqlite3_bind_int64(s, 4, ts)
        guard sqlite3_step(s) == SQLITE_DONE else { throw error("insert") }
        return sqlite3_last_insert_rowid(h)
    }

    func recent(room: String, limit: Int) throws -> [ServerEvent.Message] {
        try select(recentStatement, room: room, limit: limit, bound: nil)
    }

    func messages(room: String, after id: Int64, limit: Int) throws -> [ServerEvent.Message] {
        try select(afterStatement, room: room, limit: limit, bound: id)
    }

    func messages(room: String, before id: Int64, limit: Int) throws -> [ServerEvent.Message] {
        try select(beforeStatement, room: room, limit: limit, bound: id)
    }

    /// Forgets the client ids recorded before `created` (ms).
    func pruneClientIDs(createdBefore created: Int64) throws {
        guard let s = pruneStatement else { throw HistoryStore.Failure(description: "database closed") }
        defer { sqlite3_reset(s); sqlite3_clear_bindings(s) }
        sqlite3_bind_int64(s, 1, created)
        guard sqlite3_step(s) == SQLITE_DONE else { throw error("prune client ids") }
    }

    /// The message stored under `clientID` in `room`, if it is recorded.
    func clientMessage(room: String, clientID: String) throws -> ServerEvent.Message? {
        guard let s = clientLookupStatement else { throw HistoryStore.Failure(description: "database closed") }
        defer { sqlite3_reset(s); sqlite3_clear_bindings(s) }
        try bind(room, at: 1, in: s)
        try bind(clientID, at: 2, in: s)
        switch sqlite3_step(s) {
        case SQLITE_DONE: return nil
        case SQLITE_ROW:
            return ServerEvent.Message(id: sqlite3_column_int64(s, 0), room: column(s, 1), user: column(s, 2),
                                       text: column(s, 3), ts: sqlite3_column_int64(s, 4))
        default: throw error("client id lookup")
        }
    }

    /// Records that `clientID` in `room` stored message `messageID`.
    func recordClientID(room: String, clientID: String, messageID: Int64, created: Int64) throws {
        guard let s = clientInsertStatement else { throw HistoryStore.Failure(description: "database closed") }
        defer { sqlite3_reset(s); sqlite3_clear_bindings(s) }
        try bind(room, at: 1, in: s)
        try bind(clientID, at: 2, in: s)
        sqlite3_bind_int64(s, 3, messageID)
        sqlite3_bind_int64(s, 4, created)
        guard sqlite3_step(s) == SQLITE_DONE else { throw error("record client id") }
    }

    /// Rows of `statement` (newest first in SQL), returned oldest first; `id` binds `?3`.
    private func select(_ statement: OpaquePointer?, room: String, limit: Int, bound id: Int64?) throws -> [ServerEvent.Message] {
        guard let s = statement else { throw HistoryStore.Failure(description: "database closed") }
        defer { sqlite3_reset(s); sqlite3_clear_bindings(s) }
        try bind(room, at: 1, in: s)
        sqlite3_bind_int64(s, 2, Int64(limit))
        if let id { sqlite3_bind_int64(s, 3, id) }
        var rows: [ServerEvent.Message] = []
        while true {
            let rc = sqlite3_step(s)
            if rc == SQLITE_DONE { break }
            guard rc == SQLITE_ROW else { throw error("select") }
            rows.append(ServerEvent.Message(id: sqlite3_column_int64(s, 0), room: column(s, 1), user: column(s, 2),
                                            text: column(s, 3), ts: sqlite3_column_int64(s, 4)))
        }
        return rows.reversed()
    }

    /// Binds `value` with its UTF-8 byte count, not as a C string: a text containing U+0000
    /// is stored whole (with -1, SQLite would stop at the first NUL).
    private func bind(_ value: String, at index: Int32, in s: OpaquePointer) throws {
        let count = UInt64(value.utf8.count)
        let rc = value.withCString { sqlite3_bind_text64(s, index, $0, count, Self.transient, UInt8(SQLITE_UTF8)) }
        guard rc == SQLITE_OK else { throw error("bind") }
    }

    /// A text column read with its byte count (`sqlite3_column_bytes`), not up to its first NUL.
    private func column(_ s: OpaquePointer, _ i: Int32) -> String {
        // Text first, then its length (SQLite's documented order: the length is of that text).
        guard let p = sqlite3_column_text(s, i) else { return "" }
        let count = Int(max(0, sqlite3_column_bytes(s, i)))
        return String(decoding: UnsafeBufferPointer(start: p, count: count), as: UTF8.self)
    }

    /// Runs SQL without results (schema, `BEGIN`/`COMMIT`).
    func exec(_ sql: String) throws {
        guard sqlite3_exec(handle, sql, nil, nil, nil) == SQLITE_OK else { throw error(sql) }
    }

    private func prepare(_ sql: String) throws -> OpaquePointer {
        var s: OpaquePointer?
        guard sqlite3_prepare_v2(handle, sql, -1, &s, nil) == SQLITE_OK, let s else { throw error(sql) }
        return s
    }

    private func error(_ what: String) -> HistoryStore.Failure {
        HistoryStore.Failure(description: "\(what): \(handle.map { String(cString: sqlite3_errmsg($0)) } ?? "closed")")
    }
}
