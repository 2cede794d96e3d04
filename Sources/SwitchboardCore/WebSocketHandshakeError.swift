/// Why an opening handshake failed (RFC 6455 §4).
///
/// A struct over a private enum so that new cases are not a breaking change; compare with the
/// static members (`error == .badAccept`, `error == .rejected(status: 403)`). Equality ignores
/// the free-text detail of ``invalidArgument``.
///
/// - Server side (``WebSocketServerHandshake/classify(_:)``): ``response`` is the rejection to
///   send, with status, JSON body and any required header (`Allow: GET` for 405,
///   `Sec-WebSocket-Version: 13` for 426).
/// - Client side (``WebSocketClientHandshake/validate(_:)``): ``status`` is the non-101 status
///   received for ``rejected(status:)``.
public struct WebSocketHandshakeError: Error, Sendable, Equatable, CustomStringConvertible {
    private enum Kind: Sendable, Equatable {
        case invalidArgument
        case rejected(Int)
        case missingUpgrade, missingConnectionUpgrade, badAccept, unexpectedSubprotocol, unexpectedExtension
        case badMethod, badVersion, missingHost, badKey, unsupportedWebSocketVersion, badSubprotocol
    }

    private let kind: Kind
    private let detail: String

    private init(_ kind: Kind, _ detail: String = "") {
        self.kind = kind
        self.detail = detail
    }

    static func argument(_ detail: String) -> Self { Self(.invalidArgument, detail) }

    /// ``unexpectedExtension`` with what was wrong in the answer.
    static func unexpectedExtension(_ detail: String) -> Self { Self(.unexpectedExtension, detail) }

    /// A caller-supplied value is invalid (header injection, bad key length, bad path, …).
    public static let invalidArgument = Self(.invalidArgument)
    /// Client: the server answered with `status` instead of 101.
    public static func rejected(status: Int) -> Self { Self(.rejected(status)) }
    /// The `Upgrade` field is missing or is not `websocket` (400 on the server).
    public static let missingUpgrade = Self(.missingUpgrade)
    /// The `Connection` field lacks the `upgrade` token (400 on the server).
    public static let missingConnectionUpgrade = Self(.missingConnectionUpgrade)
    /// Client: `Sec-WebSocket-Accept` is missing, repeated or wrong (§4.1 step 4).
    public static let badAccept = Self(.badAccept)
    /// Client: the server selected a subprotocol we did not offer, or several (§4.1 step 6).
    public static let unexpectedSubprotocol = Self(.unexpectedSubprotocol)
    /// Client: the server selected an extension; we offer none (§4.1 step 5).
    public static let unexpectedExtension = Self(.unexpectedExtension)
    /// Server: an upgrade with a method other than GET (405 with `Allow: GET`).
    public static let badMethod = Self(.badMethod)
    /// Server: an upgrade over HTTP older than 1.1 (400).
    public static let badVersion = Self(.badVersion)
    /// Server: no `Host` field, or more than one (400; RFC 9112 §3.2).
    public static let missingHost = Self(.missingHost)
    /// Server: `Sec-WebSocket-Key` is missing, repeated, or not base64 of 16 bytes (400).
    public static let badKey = Self(.badKey)
    /// Server: `Sec-WebSocket-Version` is missing or not 13 (426 with `Sec-WebSocket-Version: 13`, §4.4).
    public static let unsupportedWebSocketVersion = Self(.unsupportedWebSocketVersion)
    /// Server: an offered subprotocol is not a token (400).
    public static let badSubprotocol = Self(.badSubprotocol)

    /// The non-101 status received, for ``rejected(status:)``; otherwise `nil`.
    public var status: Int? {
        if case .rejected(let status) = kind { return status }
        return nil
    }

    /// The HTTP rejection a server should send for this error, or `nil` for errors that only
    /// happen on the client side or to the caller's own arguments. The body is the one of
    /// ``HTTPResponse/error(status:message:type:code:)`` with type `invalid_request_error`.
    public var response: HTTPResponse? {
        let status: Int
        var headers = HTTPHeaders()
        switch kind {
        case .invalidArgument, .rejected, .badAccept, .unexpectedSubprotocol, .unexpectedExtension:
            return nil
        case .badMethod:
            status = 405
            headers.add(name: "Allow", value: "GET")
        case .unsupportedWebSocketVersion:
            status = 426
            headers.add(name: "Sec-WebSocket-Version", value: "13")
        case .missingUpgrade, .missingConnectionUpgrade, .badVersion, .missingHost, .badKey, .badSubprotocol:
            status = 400
        }
        var response = HTTPResponse.error(status: status, message: description, type: .invalidRequest,
                                          code: code)
        for (name, value) in headers { response.headers.add(name: name, value: value) }
        return response
    }

    private var code: String {
        switch kind {
        case .invalidArgument: return "invalid_argument"
        case .rejected: return "rejected"
        case .missingUpgrade: return "missing_upgrade"
        case .missingConnectionUpgrade: return "missing_connection_upgrade"
        case .badAccept: return "bad_accept"
        case .unexpectedSubprotocol: return "unexpected_subprotocol"
        case .unexpectedExtension: return "unexpected_extension"
        case .badMethod: return "bad_method"
        case .badVersion: return "bad_http_version"
        case .missingHost: return "missing_host"
        case .badKey: return "bad_key"
        case .unsupportedWebSocketVersion: return "unsupported_websocket_version"
        case .badSubprotocol: return "bad_subprotocol"
        }
    }

    /// A short English explanation (the HTTP status for a rejection).
    public var description: String {
        let text: String
        switch kind {
        case .invalidArgument: text = "invalid handshake argument"
        case .rejected(let status): text = "server rejected the WebSocket upgrade with status \(status)"
        case .missingUpgrade: text = "Upgrade header field is missing or not websocket"
        case .missingConnectionUpgrade: text = "Connection header field lacks the upgrade token"
        case .badAccept: text = "Sec-WebSocket-Accept is missing or does not match the key"
        case .unexpectedSubprotocol: text = "server selected a subprotocol that was not offered"
        case .unexpectedExtension: text = "server answered an extension that was not offered, or with parameters the offer does not allow"
        case .badMethod: text = "WebSocket upgrade requires the GET method"
        case .badVersion: text = "WebSocket upgrade requires HTTP/1.1 or later"
        case .missingHost: text = "exactly one Host header field is required"
        case .badKey: text = "Sec-WebSocket-Key must be base64 of 16 bytes"
        case .unsupportedWebSocketVersion: text = "only Sec-WebSocket-Version 13 is supported"
        case .badSubprotocol: text = "Sec-WebSocket-Protocol elements must be tokens"
        }
        return detail.isEmpty ? text : "\(text): \(detail)"
    }

    /// Equal when the kind (and, for ``rejected(status:)``, the status) match.
    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.kind == rhs.kind }
}
