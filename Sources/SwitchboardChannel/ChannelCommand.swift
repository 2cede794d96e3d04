import Switchboard
import SwitchboardCore
import Foundation

/// The answer to a `permission_request`.
public enum PermissionDecision: String, Sendable, Equatable, Hashable, CaseIterable {
    /// Run the tool this time only.
    case allowOnce = "allow_once"
    /// Run it, and don't ask again for this tool in this session.
    case alwaysAllow = "always_allow"
    /// Don't run it: the tool result is an error.
    case deny = "deny"

    /// Whether the tool may run.
    public var allows: Bool { self != .deny }
}

/// What a client sends on the channel, one JSON line each:
///
/// - `{"type":"message","id":"…","data":{"content":"…","model":"…"}}` (`id` and `model` omitted
///   when nil; a server runs a message whose `id` it already ran in the session only once)
/// - `{"type":"cancel","data":{}}`
/// - `{"type":"permission","data":{"tool_use_id":"…","decision":"allow_once"}}`
public enum ChannelCommand: SocketCommand, Sendable, Equatable, Hashable {
    /// Start a turn with this prompt (a running turn is cancelled first). `id`, chosen by the
    /// client, makes it safe to send again after a reconnect: the session runs it once.
    case message(content: String, model: String? = nil, id: String? = nil)
    /// Cancel the running turn; the server confirms with a `result` of subtype `cancelled`.
    case cancel
    /// Answer a `permission_request`.
    case permission(toolUseId: String, decision: PermissionDecision)

    /// The wire `type`.
    public var type: String {
        switch self {
        case .message: "message"
        case .cancel: "cancel"
        case .permission: "permission"
        }
    }

    /// One compact JSON object, `type` first, no trailing newline.
    public var message: String {
        let data: String
        var id: String?
        switch self {
        case .message(let content, let model, let commandID):
            data = JSONText.object([("content", JSONText.string(content)), ("model", model.map(JSONText.string))])
            id = commandID
        case .cancel:
            data = "{}"
        case .permission(let id, let decision):
            data = JSONText.object([("tool_use_id", JSONText.string(id)),
                                    ("decision", JSONText.string(decision.rawValue))])
        }
        return JSONText.object([("type", JSONText.string(type)), ("id", id.map(JSONText.string)), ("data", data)])
    }

    /// Why a line is not a valid command (for servers).
    public struct DecodingError: Error, Sendable, Equatable, CustomStringConvertible {
        /// What is wrong with the line, e.g. `missing "type"` or `message: missing data.content`.
        public let reason: String
        /// The ``reason``.
        public var description: String { reason }
    }

    /// Parses a command line (for servers implementing the channel).
    public init(line: Data) throws(DecodingError) {
        guard let value = try? JSONValue(parsing: line) else { throw DecodingError(reason: "not valid JSON") }
        guard case .object = value else { throw DecodingError(reason: "not a JSON object") }
        guard let type = value["type"]?.stringValue else { throw DecodingError(reason: "missing \"type\"") }
        let data = value["data"] ?? .object([:])
        switch type {
        case "message":
            guard let content = data["content"]?.stringValue else {
                throw DecodingError(reason: "message: missing data.content")
            }
            self = .message(content: content, model: data["model"]?.stringValue, id: value["id"]?.stringValue)
        case "cancel":
            self = .cancel
        case "permission":
            guard let id = data["tool_use_id"]?.stringValue else {
                throw DecodingError(reason: "permission: missing data.tool_use_id")
            }
            guard let raw = data["decision"]?.stringValue, let decision = PermissionDecision(rawValue: raw) else {
                throw DecodingError(reason: "permission: data.decision must be allow_once, always_allow or deny")
            }
            self = .permission(toolUseId: id, decision: decision)
        default:
            throw DecodingError(reason: "unknown command type \"\(type)\"")
        }
    }

    /// The in-band token refresh, `{"type":"refresh","data":{"token":"…"}}` (no newline): what
    /// a ``Channel`` with a token provider sends at 80% of its token's lifetime. The server
    /// answers with ``ChannelEvent/refreshed(expiresAt:)``, or an `error` with code
    /// `invalid_token`. A line rather than a case of this enum: it carries a secret, and a
    /// command value is easily printed or logged.
    public static func refreshLine(token: String) -> String {
        JSONText.object([("type", JSONText.string("refresh")),
                         ("data", JSONText.object([("token", JSONText.string(token))]))])
    }

    /// Parses a command line given as a string; see ``init(line:)-(Data)``.
    public init(line: String) throws(DecodingError) {
        try self.init(line: Data(line.utf8))
    }
}
