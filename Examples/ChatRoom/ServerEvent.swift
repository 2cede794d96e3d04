import ChatRoomCore
import Foundation

/// One server→client line. Optional fields are omitted when nil.
struct ServerEvent: Codable, Sendable {
    struct ErrorBody: Codable, Sendable {
        var message: String
        var type: String
        var code: String
        var retry_after: Double?
        /// In `unconfirmed`: the message's id.
        var id: Int64? = nil
    }

    /// A stored message, as sent in `history`: the same fields as a `message` event.
    struct Message: Codable, Sendable {
        var type = "message"
        var id: Int64
        var room: String
        var user: String
        var text: String
        var ts: Int64
    }

    var type: String
    var id: Int64?
    var ts: Int64?
    var room: String?
    var user: String?
    var text: String?
    var isTyping: Bool?
    var users: [String]?
    var messages: [Message]?
    /// In a `history` answering a `join` with `since`: whether every later message is included.
    var complete: Bool?
    /// In a `history` answering a plain `join` or a `history` command: the `before` of the next
    /// older page; `.some(nil)` is sent as `"next":null` (no older message kept), nil omits it.
    var next: Int64??
    /// In the `presence` answering a `join`, to the joiner only: the key its re-joins need to
    /// take the name over (``RejoinKey``).
    var rejoinKey: String?
    /// In `refreshed`: the connection's new deadline, Unix seconds.
    var exp: Int64?
    var error: ErrorBody?

    init(type: String, id: Int64? = nil, ts: Int64? = nil, room: String? = nil, user: String? = nil,
         text: String? = nil, isTyping: Bool? = nil, users: [String]? = nil, messages: [Message]? = nil,
         complete: Bool? = nil, next: Int64?? = nil, rejoinKey: String? = nil, exp: Int64? = nil,
         error: ErrorBody? = nil) {
        self.type = type; self.id = id; self.ts = ts; self.room = room; self.user = user; self.text = text
        self.isTyping = isTyping; self.users = users; self.messages = messages; self.complete = complete
        self.next = next
        self.rejoinKey = rejoinKey; self.exp = exp; self.error = error
    }

    /// A page of history: `next` always present (null when there is no older page).
    static func history(room: String, _ page: HistoryPage) -> Self {
        .init(type: "history", room: room, messages: page.messages, next: .some(page.next))
    }

    static func message(_ m: Message) -> Self {
        .init(type: "message", id: m.id, ts: m.ts, room: m.room, user: m.user, text: m.text)
    }

    static func error(_ e: ChatError) -> Self {
        .init(type: "error", error: ErrorBody(message: e.message, type: e.type, code: e.code, retry_after: e.retryAfter, id: e.messageID))
    }

    /// Compact JSON plus `\n`: one line.
    var line: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(self)) ?? Data(#"{"type":"error"}"#.utf8)
        return String(decoding: data, as: UTF8.self) + "\n"
    }
}

/// Event ids for non-message events (monotonic per server run) and timestamps (epoch ms).
enum EventStamp {
    private static let counter = AtomicCounter()
    static func nextID() -> Int64 { counter.next() }
    static func nowMillis() -> Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded()) }
}

import Synchronization

final class AtomicCounter: Sendable {
    private let value = Atomic<Int64>(0)
    func next() -> Int64 { value.add(1, ordering: .relaxed).newValue }
}

/// The id of a `message` event line (nil for any other event, or a line that is not one).
enum MessageEventID {
    private struct Head: Decodable { var type: String; var id: Int64? }

    static func of(_ payload: [UInt8]) -> Int64? {
        guard let head = try? JSONDecoder().decode(Head.self, from: Data(payload)), head.type == "message" else { return nil }
        return head.id
    }
}
