import Switchboard
import SwitchboardCore
import Foundation

/// How a turn ended (`result.subtype`).
public enum ResultSubtype: Sendable, Equatable, Hashable, CustomStringConvertible {
    /// The turn completed.
    case success
    /// The turn was cancelled by a `cancel` command or pre-empted by a new `message`.
    case cancelled
    /// The turn failed.
    case error
    /// A subtype this client does not know.
    case other(String)

    /// Creates a subtype from its wire name; unknown names become ``other(_:)``.
    public init(rawValue: String) {
        switch rawValue {
        case "success": self = .success
        case "cancelled": self = .cancelled
        case "error": self = .error
        default: self = .other(rawValue)
        }
    }

    /// The wire name (`success`, `cancelled`, `error`, or the unknown name).
    public var rawValue: String {
        switch self {
        case .success: "success"
        case .cancelled: "cancelled"
        case .error: "error"
        case .other(let s): s
        }
    }

    /// The wire name, as ``rawValue``.
    public var description: String { rawValue }
}

/// One event received on the channel (one JSON line). See docs/agent-protocol.md.
///
/// Decoding never fails: an unknown `type` becomes ``unknown(type:rawLine:)`` and a line that is
/// not JSON (or lacks a required field) becomes ``decodingFailed(rawLine:reason:)``; the stream
/// goes on either way.
public enum ChannelEvent: Sendable, Equatable, Hashable {
    /// A piece of assistant text, streamed as it is produced.
    case partial(text: String)
    /// The complete assistant message of the turn.
    case assistant(text: String, model: String?, stopReason: String?)
    /// The agent calls a tool.
    case toolUse(id: String, name: String, input: JSONValue)
    /// A tool is still running.
    case toolProgress(id: String, elapsedSeconds: Double)
    /// A tool finished (or was refused: `isError`).
    case toolResult(id: String, content: String, isError: Bool)
    /// The agent waits for a ``ChannelCommand/permission(toolUseId:decision:)`` answer.
    case permissionRequest(toolUseId: String, name: String, input: JSONValue)
    /// The answer of the turn with its token count.
    case response(content: String, tokensUsed: Int)
    /// The turn is over: the last event of every turn.
    case result(numTurns: Int, durationMs: Int, totalCostUsd: Double, subtype: ResultSubtype)
    /// An informational message from the server.
    case system(message: String)
    /// A reconnection asked for the events after a sequence number (`last_seq`) and the
    /// server could not give them all (`{"type":"system","data":{"subtype":"resume_failed",
    /// "reason":…}}`): `reason` is `buffer_exceeded` (the session's event buffer no longer
    /// reaches back), `session_not_found` (the session ended, for example after its grace
    /// period, or the server restarted: a new session starts) or `unknown_position` (a number
    /// the session never sent). The live stream follows; what was missed is lost.
    case resumeFailed(reason: String)
    /// The server accepted an in-band token refresh (`{"type":"system","data":{"subtype":"refreshed",
    /// "exp":N}}`, N in Unix seconds): the connection now lives until `expiresAt` (nil when the
    /// server sent no `exp`). Not numbered and never replayed: it belongs to the connection
    /// that refreshed. A ``Channel`` with a token provider sends the refreshes itself
    /// (``ChannelCommand/refreshLine(token:)``); a refused one comes as an ``error(message:type:param:code:)``
    /// with code `invalid_token`, and the connection keeps its old deadline.
    case refreshed(expiresAt: Date?)
    /// An error (`{"type":"error","error":{…}}`).
    case error(message: String, type: String?, param: String?, code: String?)
    /// An error of type `rate_limit_error` with `retry_after` (seconds).
    case rateLimited(retryAfter: Double)
    /// A well-formed event of a type this client does not know.
    case unknown(type: String, rawLine: String)
    /// A line that is not a valid event.
    case decodingFailed(rawLine: String, reason: String)

    /// The wire `type` (for ``unknown(type:rawLine:)`` the received one; `nil` for ``decodingFailed(rawLine:reason:)``).
    public var type: String? {
        switch self {
        case .partial: "partial"
        case .assistant: "assistant"
        case .toolUse: "tool_use"
        case .toolProgress: "tool_progress"
        case .toolResult: "tool_result"
        case .permissionRequest: "permission_request"
        case .response: "response"
        case .result: "result"
        case .system, .resumeFailed, .refreshed: "system"
        case .error, .rateLimited: "error"
        case .unknown(let type, _): type
        case .decodingFailed: nil
        }
    }

    /// The subtype if this is a `result`.
    public var resultSubtype: ResultSubtype? {
        if case .result(_, _, _, let subtype) = self { subtype } else { nil }
    }

    // MARK: Decoding

    /// Decodes one line (without its terminator).
    public init(line: Data) {
        self = Self.decodeSequenced(line).event
    }

    /// Decodes one line, with its top-level `seq` (the session's event number; nil when absent
    /// or not a non-negative integer).
    static func decodeSequenced(_ line: Data) -> (event: ChannelEvent, sequence: UInt64?) {
        let raw = String(decoding: line, as: UTF8.self)
        let value: JSONValue
        do {
            value = try JSONValue(parsing: line)
        } catch {
            return (.decodingFailed(rawLine: raw, reason: "not valid JSON"), nil)
        }
        var sequence: UInt64?
        if case .number(let n)? = value["seq"], n.isFinite, n >= 0, n < 9e15, n == n.rounded() {
            sequence = UInt64(n)
        }
        do {
            return (try Self.decode(value, raw: raw), sequence)
        } catch {
            return (.decodingFailed(rawLine: raw, reason: error.reason), sequence)
        }
    }

    /// Decodes one line given as a string; see ``init(line:)-(Data)``.
    public init(line: String) {
        self.init(line: Data(line.utf8))
    }

    private struct Failure: Error { let reason: String }

    private static func decode(_ value: JSONValue, raw: String) throws(Failure) -> ChannelEvent {
        guard case .object = value else { throw Failure(reason: "not a JSON object") }
        guard let type = value["type"]?.stringValue else { throw Failure(reason: "missing \"type\"") }
        if type == "error" { return try decodeError(value["error"] ?? value["data"]) }
        let data = value["data"] ?? .object([:])
        func string(_ key: String) throws(Failure) -> String {
            guard let s = data[key]?.stringValue else { throw Failure(reason: "\(type): missing string data.\(key)") }
            return s
        }
        func number(_ key: String) throws(Failure) -> Double {
            guard let n = data[key]?.numberValue else { throw Failure(reason: "\(type): missing number data.\(key)") }
            return n
        }
        func int(_ key: String) throws(Failure) -> Int {
            let n = try number(key)
            guard n.isFinite, n == n.rounded(), abs(n) < 9e15 else { throw Failure(reason: "\(type): data.\(key) is not an integer") }
            return Int(n)
        }
        switch type {
        case "partial":
            return .partial(text: try string("text"))
        case "assistant":
            return .assistant(text: try string("text"), model: data["model"]?.stringValue,
                              stopReason: data["stop_reason"]?.stringValue)
        case "tool_use":
            return .toolUse(id: try string("tool_use_id"), name: try string("name"), input: data["input"] ?? .null)
        case "tool_progress":
            return .toolProgress(id: try string("tool_use_id"), elapsedSeconds: try number("elapsed_seconds"))
        case "tool_result":
            return .toolResult(id: try string("tool_use_id"), content: try string("content"),
                               isError: data["is_error"]?.boolValue ?? false)
        case "permission_request":
            return .permissionRequest(toolUseId: try string("tool_use_id"), name: try string("name"),
                                      input: data["input"] ?? .null)
        case "response":
            return .response(content: try string("content"), tokensUsed: try int("tokens_used"))
        case "result":
            return .result(numTurns: try int("num_turns"), durationMs: try int("duration_ms"),
                           totalCostUsd: data["total_cost_usd"]?.numberValue ?? 0,
                           subtype: ResultSubtype(rawValue: try string("subtype")))
        case "system":
            switch data["subtype"]?.stringValue {
            case "resume_failed":
                return .resumeFailed(reason: data["reason"]?.stringValue ?? "unknown")
            case "refreshed":
                return .refreshed(expiresAt: unixTime(data["exp"]))
            default:
                break
            }
            return .system(message: try string("message"))
        default:
            return .unknown(type: type, rawLine: raw)
        }
    }

    /// A Unix time in seconds as a date; nil unless a finite number in a sane range (±10^11 s,
    /// about 3,000 years), so a hostile value cannot trap or mislead.
    private static func unixTime(_ value: JSONValue?) -> Date? {
        guard let n = value?.numberValue, n.isFinite, abs(n) < 1e11 else { return nil }
        return Date(timeIntervalSince1970: n)
    }

    private static func decodeError(_ body: JSONValue?) throws(Failure) -> ChannelEvent {
        guard let body, case .object = body else { throw Failure(reason: "error: missing \"error\" object") }
        let type = body["type"]?.stringValue
        if type == "rate_limit_error", let retry = body["retry_after"]?.numberValue {
            return .rateLimited(retryAfter: retry)
        }
        func text(_ v: JSONValue?) -> String? {
            switch v {
            case .string(let s)?: s
            case .number(let n)?: JSONText.number(n)
            default: nil
            }
        }
        return .error(message: text(body["message"]) ?? "", type: type, param: text(body["param"]),
                      code: text(body["code"]))
    }

    // MARK: Encoding

    /// The event as one compact JSON line (no terminator), `type` first, in the documented
    /// member order: what a server sends. ``unknown(type:rawLine:)`` and
    /// ``decodingFailed(rawLine:reason:)`` give back their raw line.
    public var jsonLine: String {
        func s(_ v: String) -> String { JSONText.string(v) }
        func n(_ v: Double) -> String { JSONText.number(v) }
        func event(_ type: String, _ data: [(String, String?)]) -> String {
            JSONText.object([("type", s(type)), ("data", JSONText.object(data))])
        }
        switch self {
        case .partial(let text):
            return event("partial", [("text", s(text))])
        case .assistant(let text, let model, let stopReason):
            return event("assistant", [("text", s(text)), ("model", model.map(s)), ("stop_reason", stopReason.map(s))])
        case .toolUse(let id, let name, let input):
            return event("tool_use", [("tool_use_id", s(id)), ("name", s(name)), ("input", input.jsonText)])
        case .toolProgress(let id, let elapsed):
            return event("tool_progress", [("tool_use_id", s(id)), ("elapsed_seconds", n(elapsed))])
        case .toolResult(let id, let content, let isError):
            return event("tool_result", [("tool_use_id", s(id)), ("content", s(content)),
                                         ("is_error", isError ? "true" : "false")])
        case .permissionRequest(let id, let name, let input):
            return event("permission_request", [("tool_use_id", s(id)), ("name", s(name)), ("input", input.jsonText)])
        case .response(let content, let tokens):
            return event("response", [("content", s(content)), ("tokens_used", String(tokens))])
        case .result(let turns, let ms, let cost, let subtype):
            return event("result", [("num_turns", String(turns)), ("duration_ms", String(ms)),
                                    ("total_cost_usd", n(cost)), ("subtype", s(subtype.rawValue))])
        case .system(let message):
            return event("system", [("message", s(message))])
        case .resumeFailed(let reason):
            return event("system", [("subtype", s("resume_failed")), ("reason", s(reason)),
                                    ("message", s("could not resume: \(reason); events were missed"))])
        case .refreshed(let expiresAt):
            // Whole seconds, like a JWT's `exp`; `message` for clients that know only `system`.
            let exp = expiresAt.map { n($0.timeIntervalSince1970.rounded(.down)) }
            return event("system", [("subtype", s("refreshed")), ("exp", exp), ("message", s("token refreshed"))])
        case .error(let message, let type, let param, let code):
            let body = JSONText.object([("message", s(message)), ("type", type.map(s) ?? "null"),
                                        ("param", param.map(s) ?? "null"), ("code", code.map(s) ?? "null")])
            return JSONText.object([("type", s("error")), ("error", body)])
        case .rateLimited(let retryAfter):
            let body = JSONText.object([("message", s("rate limit exceeded")), ("type", s("rate_limit_error")),
                                        ("retry_after", n(retryAfter))])
            return JSONText.object([("type", s("error")), ("error", body)])
        case .unknown(_, let raw), .decodingFailed(let raw, _):
            return raw
        }
    }
}
