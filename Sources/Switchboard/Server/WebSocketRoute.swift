import Foundation
import SwitchboardCore

/// What an authentication hook decides about an upgrade request.
public enum WebSocketAuthDecision: Sendable {
    /// Upgrade; `userInfo` becomes ``WebSocketConnection/userInfo`` (e.g. the user id).
    ///
    /// `expiresAt` is when the credential that was checked stops being valid (a token's `exp`):
    /// the server then closes the connection with `WebSocketCloseCode.tokenExpired` (4001,
    /// "token expired") unless ``WebSocketConnection/extendAuthentication(until:)`` moved the
    /// deadline later (an in-band refresh). Nil (the default) sets no deadline and costs
    /// nothing: a connection authenticated by a credential that does not expire (a shared
    /// secret, a client certificate checked at the handshake) lives as long as its peer wants.
    /// A date already past closes the connection right after the upgrade.
    case accept(userInfo: [String: String] = [:], expiresAt: Date? = nil)
    /// Refuse with this response (e.g. `HTTPResponse.error(status:message:type:code:)`, 401/403).
    case reject(HTTPResponse)

    /// `401` with the JSON error body `{"error":{"message","type","code"}}`.
    public static func unauthorized(_ message: String = "missing or invalid bearer token") -> Self {
        .reject(.error(status: 401, message: message, type: .authentication, code: "unauthorized"))
    }

    /// `403` with the JSON error body.
    public static func forbidden(_ message: String = "forbidden") -> Self {
        .reject(.error(status: 403, message: message, type: .permission, code: "forbidden"))
    }
}

/// A registered WebSocket path.
struct WebSocketRoute: Sendable {
    enum Handler: Sendable {
        /// One task per connection, running the handler (see ``WebSocketServer/route(_:compression:authenticate:handler:)``).
        case task(@Sendable (isolated WebSocketConnection) async throws -> Void)
        /// No task: callbacks on the connection's loop (see ``WebSocketServer/route(_:compression:authenticate:callbacks:)``).
        case callbacks(WebSocketCallbacksBox)
    }

    var authenticate: (@Sendable (WebSocketUpgradeRequest) async -> WebSocketAuthDecision)?
    var handler: Handler
    /// Whether permessage-deflate may be accepted here (when the server's configuration has it).
    var compression: Bool = true
}

/// Callbacks of a callback route: the lightest way to serve many connections.
///
/// They run synchronously on the connection's loop, isolated to the connection, one at a time
/// and in order; no task exists per connection, so an idle connection costs only its state,
/// and a message costs no executor hop. Do not block in them: hand slow work to a task.
/// Answer with ``WebSocketConnection/sendNow(_:compress:)``. `onOpen` and `onMessage` may throw: the
/// error is logged and the connection is closed with 1011 (internal error), as for a task
/// route's handler. Backpressure: while the connection's
/// outbound queue is above its high-water mark the connection stops reading, so a peer that
/// does not read our answers is slowed down instead of growing our memory.
public struct WebSocketCallbacks: Sendable {
    /// After the upgrade, before any message.
    public var onOpen: (@Sendable (isolated WebSocketConnection) throws -> Void)?
    /// Each received message, in order.
    public var onMessage: @Sendable (isolated WebSocketConnection, WebSocketMessage) throws -> Void
    /// Once, when the connection has closed (``WebSocketConnection/closeStatus`` tells why).
    public var onClose: (@Sendable (isolated WebSocketConnection) -> Void)?

    /// Callbacks for a route; only `onMessage` is required.
    public init(onOpen: (@Sendable (isolated WebSocketConnection) throws -> Void)? = nil,
                onMessage: @escaping @Sendable (isolated WebSocketConnection, WebSocketMessage) throws -> Void,
                onClose: (@Sendable (isolated WebSocketConnection) -> Void)? = nil) {
        self.onOpen = onOpen
        self.onMessage = onMessage
        self.onClose = onClose
    }
}

/// The callbacks of a callback route, shared by reference: one pointer per connection instead
/// of three closures.
final class WebSocketCallbacksBox: Sendable {
    let callbacks: WebSocketCallbacks
    init(_ callbacks: WebSocketCallbacks) { self.callbacks = callbacks }
}

/// Constant-time comparisons for secrets (bearer tokens), so timing does not leak how much of a
/// guess was right.
public enum ConstantTime {
    /// True when `a == b`; the time taken depends only on the lengths.
    public static func equals(_ a: some StringProtocol, _ b: some StringProtocol) -> Bool {
        compare(Array(a.utf8), Array(b.utf8))
    }

    /// True when `a == b`, for byte strings (`Data`, `[UInt8]`…); the time taken depends only
    /// on the lengths.
    public static func equals(_ a: some Collection<UInt8>, _ b: some Collection<UInt8>) -> Bool {
        compare(Array(a), Array(b))
    }

    private static func compare(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var diff = UInt8(truncatingIfNeeded: a.count ^ b.count)
        let n = max(a.count, b.count)
        for i in 0..<n {
            let x = i < a.count ? a[i] : 0
            let y = i < b.count ? b[i] : 0
            diff |= x ^ y
        }
        return diff == 0 && a.count == b.count
    }
}

extension WebSocketUpgradeRequest {
    /// The token of an `Authorization: Bearer …` header, or of a `token` query item.
    public var bearerToken: String? {
        if let auth = headers["authorization"] {
            let parts = auth.split(separator: " ", maxSplits: 1)
            if parts.count == 2, parts[0].lowercased() == "bearer" {
                return HTTPSyntax.trimmingOWS(String(parts[1]))
            }
        }
        return head.queryItems.first(where: { $0.name == "token" })?.value
    }
}
