import Foundation

/// Limits of the chat protocol (docs/chat-protocol.md).
package enum ChatLimits {
    package static let maxNameLength = 64
    package static let maxTextLength = 2000
    package static let historyCount = 50
    /// Most messages in a `history` answering a `join` with `since`.
    package static let resumeHistoryCount = 500
    /// Largest `since` accepted: ids stay below 2^53 (exact in JavaScript).
    package static let maxMessageID: Int64 = 1 << 53
    /// Rooms one connection may be in at once, by default (`--max-rooms-per-connection`): far
    /// more than a person follows, and a bound on what one connection makes the server hold
    /// (presence entries, topic subscriptions, Redis SUBSCRIBEs) however long it joins.
    package static let defaultMaxRoomsPerConnection = 100
    /// Longest `rejoinKey` accepted (the server's keys have 22 characters; room for others).
    package static let maxRejoinKeyLength = 64
    /// Longest token a `refresh` may carry: the size the token verifier accepts (8 KiB).
    package static let maxTokenLength = 8192
    /// Most messages in one page of history (the `history` command's `limit`, the HTTP API's
    /// `limit`): one reply stays bounded (200 messages of at most 2,000 characters each) while
    /// paging back through thousands of messages takes few round trips.
    package static let maxHistoryPageSize = 200
    /// Most bytes of message text (and user names) in one page of history, as JSON escapes them:
    /// a text of 2,000 characters can take up to a line's 1 MiB (combining marks), so 200 of
    /// them would make a reply of 200 MiB. A page stops before the message that would pass
    /// this (it always holds one), and its `next` continues from there. 768 KiB leaves a page
    /// under the 1 MiB line limit of Switchboard's clients.
    package static let maxHistoryPageBytes = 768 * 1024
    /// The page size when a `history` command gives no `limit`: the size of the history that
    /// answers a `join`.
    package static let defaultHistoryPageSize = 50
    /// How long a `client_id` keeps its message: a retry within this window returns the message
    /// stored the first time instead of storing it again (longer than any sane retry schedule).
    package static let clientIDWindow: Duration = .seconds(600)
    /// Longest `client_id` accepted (a UUID has 36 characters; room for others).
    package static let maxClientIDLength = 64
    /// Messages a room's Redis stream keeps by default (`--redis-history`); older ones are trimmed.
    package static let defaultRedisHistory = 1000
    /// Largest `--redis-history`: a bound on the memory a busy room takes in Redis.
    package static let maxRedisHistory = 1_000_000
}

/// A protocol error sent as `{"type":"error","error":{"message","type","code"[,"retry_after"]}}`.
package struct ChatError: Error, Equatable, Sendable {
    package var message: String
    package var type: String
    package var code: String
    package var retryAfter: Double?
    /// In `unconfirmed`: the id of the message stored (and broadcast) but not confirmed.
    package var messageID: Int64? = nil

    package static func invalidJSON(_ detail: String) -> Self {
        .init(message: "invalid JSON: \(detail)", type: "invalid_request_error", code: "invalid_json")
    }
    package static func unknownType(_ t: String) -> Self {
        .init(message: "unknown type '\(t)'", type: "invalid_request_error", code: "unknown_type")
    }
    package static func missingField(_ f: String) -> Self {
        .init(message: "missing field '\(f)'", type: "invalid_request_error", code: "missing_field")
    }
    package static func invalidField(_ f: String, _ expected: String) -> Self {
        .init(message: "field '\(f)' must be \(expected)", type: "invalid_request_error", code: "invalid_field")
    }
    package static func invalidRoom(_ why: String) -> Self {
        .init(message: "invalid room name: \(why)", type: "invalid_request_error", code: "invalid_room")
    }
    package static func invalidUser(_ why: String) -> Self {
        .init(message: "invalid user name: \(why)", type: "invalid_request_error", code: "invalid_user")
    }
    package static let emptyText = Self(message: "message text is empty", type: "invalid_request_error", code: "empty_text")
    package static let textTooLong = Self(message: "message text is longer than \(ChatLimits.maxTextLength) characters",
                                  type: "invalid_request_error", code: "text_too_long")
    package static func notJoined(_ room: String) -> Self {
        .init(message: "not joined to room '\(room)'", type: "state_error", code: "not_joined")
    }
    package static func alreadyJoined(_ room: String) -> Self {
        .init(message: "already joined to room '\(room)'", type: "state_error", code: "already_joined")
    }
    package static func tooManyRooms(_ max: Int) -> Self {
        .init(message: "already in \(max) rooms, the most a connection may join; leave one first",
              type: "state_error", code: "too_many_rooms")
    }
    package static func nameTaken(_ user: String, _ room: String) -> Self {
        .init(message: "user name '\(user)' is taken in room '\(room)'", type: "conflict_error", code: "name_taken")
    }
    package static func rateLimited(retryAfter: Double) -> Self {
        .init(message: "rate limit exceeded", type: "rate_limit_error", code: "rate_limited", retryAfter: retryAfter)
    }
    /// A `join` whose `user` is not the token's display name (servers with tokens).
    package static func forbidden(_ user: String) -> Self {
        .init(message: "user name '\(user)' is not the name in your token; omit 'user' to join under it",
              type: "permission_error", code: "forbidden")
    }
    /// A `join` of a room the token's `rooms` claim does not list.
    package static func roomForbidden(_ room: String) -> Self {
        .init(message: "your token does not allow room '\(room)'", type: "permission_error", code: "room_forbidden")
    }
    /// A `refresh` whose token does not verify (signature, expiry, issuer, audience) or names
    /// another subject. `detail` never contains the token.
    package static func invalidToken(_ detail: String) -> Self {
        .init(message: "token refused: \(detail)", type: "authentication_error", code: "invalid_token")
    }
    /// A `refresh` on a server without tokens.
    package static let refreshUnsupported = Self(message: "this server does not use tokens: nothing to refresh",
                                                 type: "invalid_request_error", code: "refresh_unsupported")
    package static let unavailable = Self(message: "the chat's shared storage (Redis) is unreachable; try again shortly",
                                          type: "api_error", code: "unavailable")
    /// The message was stored and broadcast (it has `id`), but fewer replicas than
    /// `--redis-min-replicas-ack` acknowledged it within the wait (`WAIT`): it may or may not
    /// survive the loss of the master. Retry with the same `client_id` to learn.
    package static func unconfirmed(id: Int64) -> Self {
        .init(message: "the message was stored but not confirmed by enough Redis replicas in time; it may be lost if the master fails (retry with the same client_id)",
              type: "api_error", code: "unconfirmed", messageID: id)
    }
    package static let internalError = Self(message: "internal server error", type: "internal_server_error", code: "internal")
}

/// A client→server command, validated.
package enum ClientCommand: Equatable, Sendable {
    /// `since`: the last message id the client saw in the room (a re-join): the history holds
    /// the messages after it. `rejoinKey`: the key of the `presence` that answered the client's
    /// earlier join; with `since`, a presence of the name held by another connection is taken
    /// over only when it has this key (ignored without `since`).
    /// `user` is nil only when parsed with `userRequired: false` (a server with tokens, where
    /// the token names the user).
    case join(room: String, user: String?, since: Int64? = nil, rejoinKey: String? = nil)
    /// `clientID`: the sender's id of this message (``ChatValidation/validClientID(_:field:)``):
    /// a retry with the same id in the same room within ``ChatLimits/clientIDWindow`` is stored once.
    case message(room: String, text: String, clientID: String? = nil)
    case leave(room: String)
    case typing(room: String, isTyping: Bool)
    /// A new token for this connection (at most ``ChatLimits/maxTokenLength`` bytes).
    case refresh(token: String)
    /// One page of a joined room's history: up to `limit` (1 to
    /// ``ChatLimits/maxHistoryPageSize``, default ``ChatLimits/defaultHistoryPageSize``)
    /// messages with an id below `before` (1 to ``ChatLimits/maxMessageID``; nil: the newest).
    case history(room: String, before: Int64?, limit: Int)
}

/// Parsing and validation of one inbound line: pure, shared with the test target.
package enum ChatValidation {
    /// Parses one line (UTF-8 JSON object) into a validated command. `userRequired`: whether a
    /// `join` must name its `user` (`missing_field` otherwise); false on a server with tokens.
    package static func parse(_ line: Data, userRequired: Bool = true) -> Result<ClientCommand, ChatError> {
        let value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: line)
        } catch {
            return .failure(.invalidJSON("not a JSON document"))
        }
        guard case .object(let dict) = value else { return .failure(.invalidJSON("expected a JSON object")) }
        guard let rawType = dict["type"], rawType != .null else { return .failure(.missingField("type")) }
        guard case .string(let type) = rawType else { return .failure(.invalidField("type", "a string")) }
        do throws(ChatError) {
            switch type {
            case "join":
                let room = try validName(try string(dict, "room"), field: "room")
                let user: String?
                if !userRequired, dict["user"] == nil || dict["user"] == .null {
                    user = nil
                } else {
                    user = try validName(try string(dict, "user"), field: "user")
                }
                return .success(.join(room: room, user: user, since: try since(dict), rejoinKey: try rejoinKey(dict)))
            case "message":
                let room = try validName(try string(dict, "room"), field: "room")
                let text = try string(dict, "text")
                try validateText(text)
                var clientID: String?
                if let raw = dict["client_id"], raw != .null {
                    guard case .string(let id) = raw else { throw .invalidField("client_id", "a string") }
                    clientID = try validClientID(id)
                }
                return .success(.message(room: room, text: text, clientID: clientID))
            case "leave":
                return .success(.leave(room: try validName(try string(dict, "room"), field: "room")))
            case "typing":
                let room = try validName(try string(dict, "room"), field: "room")
                guard let raw = dict["isTyping"], raw != .null else { throw .missingField("isTyping") }
                guard case .bool(let isTyping) = raw else { throw .invalidField("isTyping", "a boolean") }
                return .success(.typing(room: room, isTyping: isTyping))
            case "refresh":
                let token = try string(dict, "token")
                guard !token.isEmpty, token.utf8.count <= ChatLimits.maxTokenLength else {
                    throw .invalidField("token", "a token of 1 to \(ChatLimits.maxTokenLength) bytes")
                }
                return .success(.refresh(token: token))
            case "history":
                let room = try validName(try string(dict, "room"), field: "room")
                return .success(.history(room: room, before: try before(dict), limit: try limit(dict)))
            default:
                return .failure(.unknownType(type))
            }
        } catch {
            return .failure(error)
        }
    }

    /// `since`: absent (or null), or an integer 0…2^53.
    private static func since(_ dict: [String: JSONValue]) throws(ChatError) -> Int64? {
        guard let raw = dict["since"], raw != .null else { return nil }
        guard case .number(let n) = raw, n.isFinite, n >= 0, n <= Double(ChatLimits.maxMessageID),
              let id = Int64(exactly: n) else {
            throw .invalidField("since", "a non-negative integer message id")
        }
        return id
    }

    /// `before`: absent (or null), or an integer message id 1…2^53.
    private static func before(_ dict: [String: JSONValue]) throws(ChatError) -> Int64? {
        guard let raw = dict["before"], raw != .null else { return nil }
        guard case .number(let n) = raw, n.isFinite, n >= 1, n <= Double(ChatLimits.maxMessageID),
              let id = Int64(exactly: n) else {
            throw .invalidField("before", "a positive integer message id (at most 2^53)")
        }
        return id
    }

    /// `limit`: absent (or null: ``ChatLimits/defaultHistoryPageSize``), or an integer
    /// 1…``ChatLimits/maxHistoryPageSize``.
    private static func limit(_ dict: [String: JSONValue]) throws(ChatError) -> Int {
        guard let raw = dict["limit"], raw != .null else { return ChatLimits.defaultHistoryPageSize }
        guard case .number(let n) = raw, n.isFinite, n >= 1, n <= Double(ChatLimits.maxHistoryPageSize),
              let limit = Int(exactly: n) else {
            throw .invalidField("limit", "an integer from 1 to \(ChatLimits.maxHistoryPageSize)")
        }
        return limit
    }

    /// `rejoinKey`: absent (or null), or a string of at most 64 UTF-8 bytes.
    private static func rejoinKey(_ dict: [String: JSONValue]) throws(ChatError) -> String? {
        guard let raw = dict["rejoinKey"], raw != .null else { return nil }
        guard case .string(let key) = raw, key.utf8.count <= ChatLimits.maxRejoinKeyLength else {
            throw .invalidField("rejoinKey", "a string of at most \(ChatLimits.maxRejoinKeyLength) characters")
        }
        return key
    }

    private static func string(_ dict: [String: JSONValue], _ key: String) throws(ChatError) -> String {
        guard let raw = dict[key], raw != .null else { throw .missingField(key) }
        guard case .string(let s) = raw else { throw .invalidField(key, "a string") }
        return s
    }

    /// Room and user names: trimmed, 1–64 characters, no control characters.
    package static func validName(_ raw: String, field: String) throws(ChatError) -> String {
        let name = raw.trimmingCharacters(in: .whitespacesAndNewlines)
        let fail: (String) -> ChatError = { field == "room" ? .invalidRoom($0) : .invalidUser($0) }
        if name.isEmpty { throw fail("empty") }
        if name.count > ChatLimits.maxNameLength { throw fail("longer than \(ChatLimits.maxNameLength) characters") }
        if name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            throw fail("contains control characters")
        }
        return name
    }

    /// A post's `client_id` (safe retries): 1 to ``ChatLimits/maxClientIDLength`` characters,
    /// no control characters; `field` names it in the error (`client_id`).
    package static func validClientID(_ raw: String, field: String = "client_id") throws(ChatError) -> String {
        guard !raw.isEmpty, raw.count <= ChatLimits.maxClientIDLength, raw.utf8.count <= 4 * ChatLimits.maxClientIDLength,
              !raw.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw .invalidField(field, "a string of 1 to \(ChatLimits.maxClientIDLength) characters without control characters")
        }
        return raw
    }

    /// Message text: not blank, at most 2000 characters (Swift `Character`s, i.e. grapheme clusters).
    package static func validateText(_ text: String) throws(ChatError) {
        if text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty { throw .emptyText }
        if text.count > ChatLimits.maxTextLength { throw .textTooLong }
    }
}

/// Any JSON value; distinguishes booleans from numbers (unlike `JSONSerialization`).
package enum JSONValue: Decodable, Equatable, Sendable {
    case null, bool(Bool), number(Double), string(String), array([JSONValue]), object([String: JSONValue])

    package init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null }
        else if let b = try? c.decode(Bool.self) { self = .bool(b) }
        else if let n = try? c.decode(Double.self) { self = .number(n) }
        else if let s = try? c.decode(String.self) { self = .string(s) }
        else if let a = try? c.decode([JSONValue].self) { self = .array(a) }
        else { self = .object(try c.decode([String: JSONValue].self)) }
    }
}
