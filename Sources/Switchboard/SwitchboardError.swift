import Foundation
import Synchronization
import SwitchboardCore

/// The one error type of the Switchboard I/O layer and public API.
///
/// A struct over a private enum so new cases never break users' `switch`es: compare with the
/// `kind` property, or match the static members (`error.kind == .notConnected`).
public struct SwitchboardError: Error, Sendable, Equatable, CustomStringConvertible, LocalizedError, CustomReflectable {
    /// What class of failure this is.
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        fileprivate let name: String
        /// The host name could not be resolved.
        public static let dns = Kind(name: "dns")
        /// The TCP connection could not be made (``SwitchboardError/errno`` says why).
        public static let connect = Kind(name: "connect")
        /// TLS failed: the handshake (certificate verification included), a TLS record, or loading the
        /// server's certificate and key.
        public static let tls = Kind(name: "tls")
        /// The server's certificate matched none of the pinned public keys
        /// (``TLSConfiguration/PublicKeyPins``); the message lists the keys it presented.
        public static let certificatePinning = Kind(name: "certificatePinning")
        /// The HTTP `CONNECT` proxy refused the tunnel: ``SwitchboardError/httpStatus`` is 407
        /// when it wants credentials or refused the ones sent, 5xx when it could not reach the
        /// target, anything else when it would not allow it. (A proxy that cannot be resolved or
        /// reached is a ``dns`` or ``connect`` error naming the proxy.)
        public static let proxy = Kind(name: "proxy")
        /// The server answered the upgrade with an HTTP status other than 101
        /// (``SwitchboardError/httpStatus`` and ``SwitchboardError/httpBody``).
        public static let handshakeRejected = Kind(name: "handshakeRejected")
        /// The opening handshake failed otherwise: an invalid HTTP answer, a bad `Sec-WebSocket-Accept`,
        /// or the connection closed during it.
        public static let handshakeFailed = Kind(name: "handshakeFailed")
        /// The peer broke RFC 6455; ``SwitchboardError/closeCode`` is the code we closed with.
        public static let protocolViolation = Kind(name: "protocolViolation")
        /// The connection is closing or closed, so nothing more can be sent
        /// (``SwitchboardError/closeCode`` is the close code).
        public static let closed = Kind(name: "closed")
        /// No connection: a client used before `connect`, after the end, or while disconnected.
        public static let notConnected = Kind(name: "notConnected")
        /// Something took too long: TCP connect, the opening or closing handshake, or a keepalive pong.
        public static let timedOut = Kind(name: "timedOut")
        /// An argument was refused before anything was sent: an endpoint's host, port, path or
        /// headers, a URL, text that is not UTF-8, a ping payload over 125 bytes, or a server
        /// host that does not resolve.
        public static let invalidArgument = Kind(name: "invalidArgument")
        /// A limit of ours was exceeded: a received line longer than the line limit (close code
        /// 1009), the outbound queue (its hard limit, or its high-water mark with the `.fail`
        /// send policy) or the commands queued while reconnecting (1013).
        /// ``SwitchboardError/closeCode`` is the code that goes with it. (A frame or message over
        /// the protocol limits is a ``protocolViolation`` with 1009.)
        public static let limitExceeded = Kind(name: "limitExceeded")
        /// A socket system call failed (``SwitchboardError/errno``).
        public static let io = Kind(name: "io")
        /// The task waiting for the operation was cancelled.
        public static let cancelled = Kind(name: "cancelled")
        /// A second task called `receive()` on a connection while another was waiting there.
        public static let concurrentReceive = Kind(name: "concurrentReceive")
        /// A client's token provider (`SocketAdapter`'s `tokenProvider`) threw before a connect
        /// attempt: ``SwitchboardError/message`` describes its error. Final: reconnection
        /// ends with it, since no attempt can be authenticated without a token.
        public static let tokenProvider = Kind(name: "tokenProvider")
        /// The kind's name, e.g. `notConnected`.
        public var description: String { name }
    }

    /// What class of failure this is; compare with the static members of ``Kind``.
    public var kind: Kind { storage.fields.kind }
    /// Human-readable detail; never contains credentials.
    public var message: String { storage.fields.message }
    /// HTTP status for `.handshakeRejected` and `.proxy`.
    public var httpStatus: Int? { storage.fields.httpStatus }
    /// Response body for `.handshakeRejected` (at most 64 KiB kept).
    public var httpBody: String? { storage.fields.httpBody }
    /// The close code for `.protocolViolation`, `.closed` and `.limitExceeded`.
    public var closeCode: WebSocketCloseCode? { storage.fields.closeCode }
    /// `errno` for `.connect` and `.io`.
    public var errno: Int32? { storage.fields.errno }

    /// The fields, in one immutable object: the error itself is one reference wide. Every
    /// `try await` of a function that throws `SwitchboardError` keeps room for the error in the
    /// caller's async frame; at about 80 bytes of fields, that room alone pushed a task route's
    /// handler out of its task's first allocator slab (about 1 KiB more per idle connection).
    private let storage: Storage

    private struct Fields {
        let kind: Kind
        let message: String
        let httpStatus: Int?
        let httpBody: String?
        let closeCode: WebSocketCloseCode?
        let errno: Int32?
    }

    /// Errors are mostly made on an event loop's thread and read in a task that a continuation
    /// resumed. The runtime orders the two, but ThreadSanitizer cannot see through a resumption
    /// into an actor that is already running (the reason for `ClientConnector.handoff` too),
    /// and would report the fields' reads as races with their writes; a release after the
    /// writes and an acquire before every read make the order visible to it. Errors are rare:
    /// the two atomic operations cost nothing that matters.
    private final class Storage: Sendable {
        private let stored: Fields
        private let published = Atomic<Bool>(false)

        init(_ fields: Fields) {
            stored = fields
            published.store(true, ordering: .releasing)
        }

        var fields: Fields {
            _ = published.load(ordering: .acquiring)
            return stored
        }
    }

    package init(kind: Kind, message: String, httpStatus: Int? = nil, httpBody: String? = nil,
         closeCode: WebSocketCloseCode? = nil, errno: Int32? = nil) {
        storage = Storage(Fields(kind: kind, message: message, httpStatus: httpStatus, httpBody: httpBody,
                                 closeCode: closeCode, errno: errno))
    }

    /// Equal when every field is.
    public static func == (a: Self, b: Self) -> Bool {
        a.storage === b.storage || (a.kind == b.kind && a.message == b.message && a.httpStatus == b.httpStatus
            && a.httpBody == b.httpBody && a.closeCode == b.closeCode && a.errno == b.errno)
    }

    static func dns(host: String, message: String) -> Self {
        Self(kind: .dns, message: "cannot resolve \(host): \(message)")
    }
    static func connect(_ e: SocketError, address: String) -> Self {
        Self(kind: .connect, message: "cannot connect to \(address): \(e)", errno: e.errno)
    }
    static func tls(_ message: String) -> Self { Self(kind: .tls, message: message) }
    /// A TLS failure; a pin mismatch gets its own kind.
    static func tls(_ error: TLSError) -> Self {
        Self(kind: error.unpinnedPublicKeys == nil ? .tls : .certificatePinning, message: error.description)
    }
    static func proxy(_ message: String, status: Int? = nil) -> Self {
        Self(kind: .proxy, message: message, httpStatus: status)
    }
    static func handshakeRejected(status: Int, body: String) -> Self {
        Self(kind: .handshakeRejected, message: "server rejected the WebSocket upgrade with HTTP \(status)",
             httpStatus: status, httpBody: body)
    }
    static func handshakeFailed(_ message: String) -> Self { Self(kind: .handshakeFailed, message: message) }
    static func protocolViolation(_ e: WebSocketProtocolError) -> Self {
        Self(kind: .protocolViolation, message: e.description, closeCode: e.closeCode)
    }
    static func closed(code: WebSocketCloseCode, reason: String) -> Self {
        Self(kind: .closed, message: "connection closed: \(code)\(reason.isEmpty ? "" : " \(reason)")", closeCode: code)
    }
    static let notConnected = Self(kind: .notConnected, message: "not connected")
    static func timedOut(_ what: String) -> Self { Self(kind: .timedOut, message: "\(what) timed out") }
    static func invalidArgument(_ message: String) -> Self { Self(kind: .invalidArgument, message: message) }
    static func limitExceeded(_ message: String, closeCode: WebSocketCloseCode = .messageTooBig) -> Self {
        Self(kind: .limitExceeded, message: message, closeCode: closeCode)
    }
    static func tokenProvider(_ error: any Error) -> Self {
        Self(kind: .tokenProvider, message: "the token provider failed: \(String(describing: error))")
    }
    static func io(_ e: SocketError) -> Self { Self(kind: .io, message: e.description, errno: e.errno) }
    static let cancelled = Self(kind: .cancelled, message: "cancelled")
    static let concurrentReceive = Self(kind: .concurrentReceive,
                                        message: "another task is already waiting for this connection's next message; receive from one task at a time")

    /// `SwitchboardError.<kind>: <message>`, followed by the start of the HTTP body of a
    /// rejected handshake, if any.
    public var description: String {
        var s = "SwitchboardError.\(kind): \(message)"
        if let httpBody, !httpBody.isEmpty { s += " — body: \(httpBody.prefix(512))" }
        return s
    }

    /// The fields that are set, in declaration order (`dump`, a debugger's `po`): not the
    /// single reference they are stored behind.
    public var customMirror: Mirror {
        var children: [(label: String?, value: Any)] = [("kind", kind), ("message", message)]
        if let httpStatus { children.append(("httpStatus", httpStatus)) }
        if let httpBody { children.append(("httpBody", httpBody)) }
        if let closeCode { children.append(("closeCode", closeCode)) }
        if let errno { children.append(("errno", errno)) }
        return Mirror(self, children: children, displayStyle: .struct)
    }

    /// The same text as ``description``.
    public var errorDescription: String? { description }
}
