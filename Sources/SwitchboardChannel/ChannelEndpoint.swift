import Foundation
import Switchboard
import SwitchboardCore

/// Errors of the channel layer that are not transport errors (those are `SwitchboardError`).
public enum ChannelError: Error, Sendable, Equatable, CustomStringConvertible, LocalizedError {
    /// The base URL is not a host-only `ws`/`wss`/`http`/`https` URL.
    case invalidBaseURL(reason: String)
    /// The session id is empty.
    case invalidSessionID(reason: String)

    /// A short English explanation, naming the case.
    public var description: String {
        switch self {
        case .invalidBaseURL(let reason): "ChannelError.invalidBaseURL: \(reason)"
        case .invalidSessionID(let reason): "ChannelError.invalidSessionID: \(reason)"
        }
    }

    /// The same text as ``description``.
    public var errorDescription: String? { description }
}

/// The `/v1/ws` agent channel of one session.
///
/// ```swift
/// let endpoint = try ChannelEndpoint(baseURL: "wss://api.example.com", sessionID: id, token: token)
/// ```
///
/// The request is `GET /v1/ws?session_id=<id>` with `Authorization: Bearer <token>`; the session
/// id is percent-encoded with the RFC 3986 unreserved set. The token never appears in
/// `description`, `debugDescription`, `String(reflecting:)`, `dump` or string interpolation;
/// these show `redactedURL`, e.g. `ws://127.0.0.1:8090/v1/ws?session_id=a%20b`.
public struct ChannelEndpoint: SocketEndpoint, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable {
    /// The request path of the channel.
    public static let channelPath = "/v1/ws"

    /// `.ws` for a `ws://` or `http://` base URL, `.wss` for `wss://` or `https://`.
    public let scheme: SocketScheme
    /// The host of the base URL (IPv6 literals without brackets).
    public let host: String
    /// The port of the base URL, or 443 for `wss`, 80 for `ws`.
    public let port: Int
    /// The session id, as given (it is percent-encoded only in the request target).
    public let sessionID: String
    /// Client TLS settings, used for `wss`.
    public let tls: TLSConfiguration
    /// TCP connect timeout per address.
    public var connectTimeout: Duration
    /// Limits and timeouts of the connection.
    public var configuration: WebSocketConfiguration
    /// The `seq` of the last event received in this session, sent as `last_seq` to resume
    /// after it (the server replays the events after it, or answers
    /// ``ChannelEvent/resumeFailed(reason:)``); nil (the default) opens or continues the session
    /// without replay. ``Channel/connect(_:reconnect:group:logger:tokenProvider:)`` sets it on every
    /// reconnection (0 when no event was received yet: the session is replayed from its start).
    public var lastSequence: UInt64?
    private let token: Secret?

    /// Creates the endpoint of session `sessionID` on the server at `baseURL`.
    ///
    /// - Parameters:
    ///   - baseURL: `ws://`, `wss://`, `http://` (→ ws) or `https://` (→ wss) with host and
    ///     optional port only; a path other than `""`/`"/"`, a query, a fragment or user info
    ///     throws ``ChannelError/invalidBaseURL(reason:)``.
    ///   - sessionID: any non-empty string; it is percent-encoded for you.
    ///   - token: bearer token, sent as `Authorization: Bearer <token>` (nil: no header).
    ///     A token containing CR, LF or NUL throws ``ChannelError/invalidBaseURL(reason:)``.
    ///   - tls: client TLS settings for `wss` (default: verify the chain and the host name).
    ///   - connectTimeout: TCP connect timeout per address.
    ///   - configuration: limits and timeouts of the connection.
    /// - Throws: ``ChannelError`` for a bad base URL, an empty session id or a bad token.
    ///     A token containing CR, LF or NUL throws ``ChannelError/invalidBaseURL(reason:)``.
    ///   - tls: client TLS settings for `wss` (default: verify the chain and the host name).
    ///   - connectTimeout: TCP connect timeout per address.
    ///   - configuration: limits and timeouts of the connection.
    /// - Throws: ``ChannelError`` for a bad base URL, an empty session id or a bad token.
    public init(baseURL: String, sessionID: String, token: String?, tls: TLSConfiguration = .default,
                connectTimeout: Duration = .seconds(10),
                configuration: WebSocketConfiguration = .default) throws(ChannelError) {
        guard let components = URLComponents(string: baseURL) else {
            throw .invalidBaseURL(reason: "not a URL")
        }
        let scheme: SocketScheme
        switch components.scheme?.lowercased() {
        case "ws", "http": scheme = .ws
        case "wss", "https": scheme = .wss
        case let other?: throw .invalidBaseURL(reason: "unsupported scheme \"\(other)\" (use ws, wss, http or https)")
        case nil: throw .invalidBaseURL(reason: "missing scheme (use ws://, wss://, http:// or https://)")
        }
        // Never echo user info: it may hold a password.
        guard components.user == nil, components.password == nil else {
            throw .invalidBaseURL(reason: "user info is not allowed in the base URL (pass the token separately)")
        }
        guard let bracketedHost = components.host, !bracketedHost.isEmpty else {
            throw .invalidBaseURL(reason: "missing host")
        }
        let host = SocketAddress.hostWithoutBrackets(bracketedHost)
        let path = components.percentEncodedPath
        guard path.isEmpty || path == "/" else {
            throw .invalidBaseURL(reason: "base URL must be host-only, but it has the path \"\(path)\" (the channel path \(Self.channelPath) is added for you)")
        }
        guard components.percentEncodedQuery == nil else {
            throw .invalidBaseURL(reason: "base URL must not have a query (the session id is added for you)")
        }
        guard components.fragment == nil else { throw .invalidBaseURL(reason: "base URL must not have a fragment") }
        let port = components.port ?? (scheme == .wss ? 443 : 80)
        guard (1...65535).contains(port) else { throw .invalidBaseURL(reason: "port \(port) out of range") }
        guard !sessionID.isEmpty else { throw .invalidSessionID(reason: "session id is empty") }
        if let token, token.utf8.contains(where: { $0 == 13 || $0 == 10 || $0 == 0 }) {
            throw .invalidBaseURL(reason: "token contains CR, LF or NUL")
        }
        self.scheme = scheme
        self.host = host
        self.port = port
        self.sessionID = sessionID
        self.token = token.map(Secret.init)
        self.tls = tls
        self.connectTimeout = connectTimeout
        self.configuration = configuration
    }

    /// Always ``channelPath``, `/v1/ws`.
    public var path: String { Self.channelPath }
    /// `session_id` (encoded with the RFC 3986 unreserved set when the request is made), and
    /// `last_seq` when ``lastSequence`` is set.
    public var queryItems: [(name: String, value: String)] {
        guard let lastSequence else { return [("session_id", sessionID)] }
        return [("session_id", sessionID), ("last_seq", String(lastSequence))]
    }
    /// `Authorization: Bearer <token>` when a token is set; otherwise none.
    public var headers: [(name: String, value: String)] {
        token.map { [("Authorization", "Bearer \($0.value)")] } ?? []
    }

    /// Whether a bearer token is configured (the token itself is not exposed).
    public var hasToken: Bool { token != nil }

    /// `ChannelEndpoint(<redacted URL>, token: <redacted>)` (or `token: none`): never the token.
    public var description: String {
        "ChannelEndpoint(\(redactedURL), token: \(token == nil ? "none" : "<redacted>"))"
    }

    /// The same text as ``description``: never the token.
    public var debugDescription: String { description }

    /// A mirror with the redacted URL and `token: <redacted>` (or `none`), so `dump` never shows the token.
    public var customMirror: Mirror {
        Mirror(self, children: ["url": redactedURL, "token": token == nil ? "none" : "<redacted>"],
               displayStyle: .struct)
    }
}

/// Holds a credential; every textual form is redacted.
struct Secret: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    let value: String
    var description: String { "<redacted>" }
    var debugDescription: String { "<redacted>" }
    var customMirror: Mirror { Mirror(self, children: []) }
}
