import ChatRoomCore
import ExampleSupport
import Foundation
import Switchboard
import SwitchboardCore

/// The chat-room's HTTP API for backends (docs/chat-protocol.md "HTTP API"):
///
/// - `POST /v1/rooms/{room}/messages` with `{"user","text","client_id"?}`: stored and broadcast
///   like a chat message (to every process sharing the Redis, through the backplane envelope);
///   `200 {"id":N,"ts":T}`. A `client_id` seen in the room within
///   ``ChatLimits/clientIDWindow`` returns the message stored then (a safe retry). With
///   `--redis-min-replicas-ack` above 0, answered once the replicas acknowledged it, else `503`
///   `unconfirmed` (the body's `error.id` is the message's id) or `503` `unavailable`.
/// - `GET /v1/rooms/{room}/messages?before=ID&limit=N`: one page of history, oldest first, and
///   `next`, the `before` of the next older page (null at the oldest).
///
/// Off unless ``APIAccess/isEnabled`` (`--api-key-file` or the token flags): then every path here
/// is a `404` like any unknown one. Every failure has the server's JSON error body.
struct ChatAPI: Sendable {
    /// The first segments of every API path.
    static let roomsPrefix = "/v1/rooms/"
    /// The last segment of the messages resource.
    static let messagesSuffix = "/messages"
    /// The scope a token needs (in its `scope` or `scopes` claim).
    static let scope = "publish"

    let backend: any ChatBackend
    let access: APIAccess

    /// The answer to `request`, or nil when its path is not the API's (or the API is off).
    func respond(to request: HTTPRequest) async -> HTTPResponse? {
        guard access.isEnabled, let rawRoom = Self.roomSegment(of: request.head.path) else { return nil }
        if case .denied(let response) = await access.check(request.head, scope: Self.scope) { return response }
        let room: String
        do throws(ChatError) {
            guard let decoded = rawRoom.removingPercentEncoding else {
                throw .invalidRoom("bad percent-encoding in the path")
            }
            room = try ChatValidation.validName(decoded, field: "room")
        } catch {
            return Self.response(for: error)
        }
        switch request.head.method {
        case "POST":
            return await post(room: room, body: request.body)
        case "GET":
            return await history(room: room, query: request.head.queryItems)
        default:
            var response = HTTPResponse.error(status: 405, message: "method not allowed: use GET or POST",
                                              type: .invalidRequest, code: "method_not_allowed")
            response.headers.replaceOrAdd(name: "Allow", value: "GET, POST")
            return response
        }
    }

    /// The room segment of `/v1/rooms/{room}/messages` (still percent-encoded), or nil for any
    /// other path. The segment must not be empty nor hold a raw `/` (an encoded `%2F` is part of
    /// the name).
    static func roomSegment(of path: String) -> Substring? {
        guard path.hasPrefix(roomsPrefix), path.hasSuffix(messagesSuffix),
              path.utf8.count > roomsPrefix.utf8.count + messagesSuffix.utf8.count else { return nil }
        let segment = path.dropFirst(roomsPrefix.count).dropLast(messagesSuffix.count)
        guard !segment.contains("/") else { return nil }
        return segment
    }

    // MARK: POST

    private func post(room: String, body: [UInt8]) async -> HTTPResponse {
        let user: String, text: String, clientID: String?
        do throws(ChatError) {
            (user, text, clientID) = try Self.parsePost(body)
        } catch {
            return Self.response(for: error)
        }
        do {
            let outcome = try await backend.postReportingRetry(room: room, user: user, text: text, clientID: clientID)
            let stored = outcome.message
            // With --redis-min-replicas-ack: answered once the replicas acknowledged it.
            guard await backend.waitForReplicas(of: stored) else {
                return Self.response(for: .unconfirmed(id: stored.id))
            }
            return .json(status: 200, "{\"id\":\(stored.id),\"ts\":\(stored.ts)}")
        } catch {
            return Self.response(for: error as? ChatError ?? .internalError)
        }
    }

    /// `{"user","text","client_id"?}`: the join's name rules for `user`, the message rules for
    /// `text`, `client_id` 1…``ChatLimits/maxClientIDLength`` characters without control
    /// characters. Other members are ignored.
    static func parsePost(_ body: [UInt8]) throws(ChatError) -> (user: String, text: String, clientID: String?) {
        guard !body.isEmpty else { throw .invalidJSON("empty body: expected {\"user\",\"text\"}") }
        let value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: Data(body))
        } catch {
            throw .invalidJSON("not a JSON document")
        }
        guard case .object(let dict) = value else { throw .invalidJSON("expected a JSON object") }
        let user = try ChatValidation.validName(try string(dict, "user"), field: "user")
        let text = try string(dict, "text")
        try ChatValidation.validateText(text)
        var clientID: String?
        if let raw = dict["client_id"], raw != .null {
            guard case .string(let id) = raw, !id.isEmpty, id.count <= ChatLimits.maxClientIDLength,
                  !id.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
                throw .invalidField("client_id", "a string of 1 to \(ChatLimits.maxClientIDLength) characters")
            }
            clientID = id
        }
        return (user, text, clientID)
    }

    private static func string(_ dict: [String: JSONValue], _ key: String) throws(ChatError) -> String {
        guard let raw = dict[key], raw != .null else { throw .missingField(key) }
        guard case .string(let s) = raw else { throw .invalidField(key, "a string") }
        return s
    }

    // MARK: GET

    private func history(room: String, query: [(name: String, value: String)]) async -> HTTPResponse {
        let before: Int64?, limit: Int
        do throws(ChatError) {
            (before, limit) = try Self.parsePage(query)
        } catch {
            return Self.response(for: error)
        }
        do {
            let page = try await backend.history(room: room, before: before, limit: limit)
            return .json(status: 200, Self.pageJSON(page))
        } catch {
            return Self.response(for: error as? ChatError ?? .internalError)
        }
    }

    /// `before`: a message id 1…2^53 (absent: from the newest); `limit`: 1…200 (absent: 50).
    /// Each at most once.
    static func parsePage(_ query: [(name: String, value: String)]) throws(ChatError) -> (before: Int64?, limit: Int) {
        func single(_ name: String) throws(ChatError) -> String? {
            let values = query.filter { $0.name == name }
            guard values.count <= 1 else { throw .invalidField(name, "given once") }
            return values.first?.value
        }
        var before: Int64?
        if let raw = try single("before") {
            guard raw.utf8.allSatisfy({ (48...57).contains($0) }), raw.utf8.count <= 16, let id = Int64(raw),
                  id >= 1, id <= ChatLimits.maxMessageID else {
                throw .invalidField("before", "a message id, 1 to \(ChatLimits.maxMessageID)")
            }
            before = id
        }
        var limit = ChatLimits.defaultHistoryPageSize
        if let raw = try single("limit") {
            guard raw.utf8.allSatisfy({ (48...57).contains($0) }), raw.utf8.count <= 4, let n = Int(raw),
                  (1...ChatLimits.maxHistoryPageSize).contains(n) else {
                throw .invalidField("limit", "an integer from 1 to \(ChatLimits.maxHistoryPageSize)")
            }
            limit = n
        }
        return (before, limit)
    }

    /// `{"messages":[…],"next":ID|null}`: each message with the fields of a `message` event.
    static func pageJSON(_ page: HistoryPage) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let messages = (try? encoder.encode(page.messages)).map { String(decoding: $0, as: UTF8.self) } ?? "[]"
        return "{\"messages\":\(messages),\"next\":\(page.next.map(String.init) ?? "null")}"
    }

    // MARK: Errors

    /// A chat error as an HTTP answer: `400` for request errors, `503` while Redis is away,
    /// `500` otherwise; the body is the server's `{"error":{"message","type","code"}}`.
    static func response(for error: ChatError) -> HTTPResponse {
        let status: Int
        switch (error.type, error.code) {
        case (_, ChatError.unavailable.code), (_, "unconfirmed"): status = 503
        case ("invalid_request_error", _): status = 400
        case ("authentication_error", _): status = 401
        case ("permission_error", _): status = 403
        case ("rate_limit_error", _): status = 429
        default: status = 500
        }
        if let id = error.messageID {
            // `unconfirmed`: the error body plus the stored message's id.
            let message = String(decoding: (try? JSONEncoder().encode(error.message)) ?? Data("\"\"".utf8), as: UTF8.self)
            return .json(status: status, "{\"error\":{\"code\":\"\(error.code)\",\"id\":\(id),\"message\":\(message),\"type\":\"\(error.type)\"}}")
        }
        return .error(status: status, message: error.message, type: HTTPErrorType(rawValue: error.type), code: error.code)
    }
}
