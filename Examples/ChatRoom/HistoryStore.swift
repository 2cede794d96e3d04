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
    /// order), and returns it with its row id.
    func append(room: String, user: String, text: String, ts: Int64,
                then: (ServerEvent.Message) -> Void = { _ in }) throws -> ServerEvent.Message {
        let id = try db.insert(room: room, user: user, text: text, ts: ts)
        let stored = ServerEvent.Message(id: id, room: room, user: user, text: text, ts: ts)
        then(stored)
        return stored
    }

    /// The newest `limit` messages of `room` with an id above `id`, oldest first.
    func messages(room: String, after id: Int64, limit: Int) throws -> [ServerEvent.Message] {
        try db.messages(room: room, after: id, limit: limit)
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
    }

    deinit { close() }

    func close() {
        sqlite3_finalize(insertStatement); insertStatement = nil
        sqlite3_finalize(recentStatement); recentStatement = nil
        sqlite3_finalize(afterStatement); afterStatement = nil
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
        try select(recentStatement, room: room, limit: limit, after: nil)
    }

    func messages(room: String, after id: Int64, limit: Int) throws -> [ServerEvent.Message] {
        try select(afterStatement, room: room, limit: limit, after: id)
    }

    /// Rows of `statement` (newest first in SQL), returned oldest first.
    private func select(_ statement: OpaquePointer?, room: String, limit: Int, after id: Int64?) throws -> [ServerEvent.Message] {
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

    private func exec(_ sql: String) throws {
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
