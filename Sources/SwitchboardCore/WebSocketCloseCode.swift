/// A close status code (RFC 6455 §7.4).
///
/// Open struct with named statics: application codes (3000–4999) and codes registered after
/// this library was written stay representable.
public struct WebSocketCloseCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The numeric code as on the wire.
    public let rawValue: UInt16

    /// Creates a code from any value, without checking it; see
    /// ``init(validatingWireCode:)`` for codes read off the wire.
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    /// Creates a code read from a close frame, or `nil` if that code must never appear on the
    /// wire (§7.4.1, §7.4.2): below 1000, 1004–1006, 1015, 1016–2999 (unassigned), above 4999.
    /// A peer that sends such a code has violated the protocol (answer with 1002).
    public init?(validatingWireCode code: UInt16) {
        guard Self.isValidOnWire(code) else { return nil }
        self.rawValue = code
    }

    /// Whether `code` may appear in a close frame (§7.4.1; IANA registry as of 2024).
    public static func isValidOnWire(_ code: UInt16) -> Bool {
        switch code {
        case 1000...1003, 1007...1014: return true
        case 3000...4999: return true
        default: return false
        }
    }

    /// Whether this code may be put on the wire by us (1005, 1006 and 1015 never are).
    public var isSendable: Bool { Self.isValidOnWire(rawValue) }

    /// 1000: the purpose of the connection has been fulfilled.
    public static let normalClosure = Self(rawValue: 1000)
    /// 1001: the endpoint is going away (server shutdown, page navigation).
    public static let goingAway = Self(rawValue: 1001)
    /// 1002: protocol error.
    public static let protocolError = Self(rawValue: 1002)
    /// 1003: a data type the endpoint cannot accept.
    public static let unsupportedData = Self(rawValue: 1003)
    /// 1005: reserved; means "no status code was present". Never sent.
    public static let noStatusReceived = Self(rawValue: 1005)
    /// 1006: reserved; means "closed without a close frame". Never sent.
    public static let abnormalClosure = Self(rawValue: 1006)
    /// 1007: message data inconsistent with its type (e.g. invalid UTF-8 in a text message).
    public static let invalidPayloadData = Self(rawValue: 1007)
    /// 1008: the message violates the endpoint's policy.
    public static let policyViolation = Self(rawValue: 1008)
    /// 1009: the message is too big to process.
    public static let messageTooBig = Self(rawValue: 1009)
    /// 1010: the client expected the server to negotiate an extension.
    public static let mandatoryExtension = Self(rawValue: 1010)
    /// 1011: the server hit an unexpected condition.
    public static let internalError = Self(rawValue: 1011)
    /// 1012: the service is restarting.
    public static let serviceRestart = Self(rawValue: 1012)
    /// 1013: try again later (temporary overload).
    public static let tryAgainLater = Self(rawValue: 1013)
    /// 1014: a gateway received an invalid response.
    public static let badGateway = Self(rawValue: 1014)
    /// 1015: reserved; TLS handshake failure. Never sent.
    public static let tlsHandshakeFailure = Self(rawValue: 1015)
    /// 4001 (application range): the credential the connection was accepted with expired and
    /// was not refreshed in time; reason text "token expired". Sent by the server when the
    /// deadline of `WebSocketAuthDecision.accept(userInfo:expiresAt:)` passes. A client should
    /// reconnect only with a new token (the client adapter's reconnect policy does so when it
    /// has a token provider, and treats the close as final otherwise).
    public static let tokenExpired = Self(rawValue: 4001)

    /// The code and its name, e.g. `1000 (normal closure)`.
    public var description: String {
        let name: String
        switch rawValue {
        case 1000: name = "normal closure"
        case 1001: name = "going away"
        case 1002: name = "protocol error"
        case 1003: name = "unsupported data"
        case 1005: name = "no status received"
        case 1006: name = "abnormal closure"
        case 1007: name = "invalid payload data"
        case 1008: name = "policy violation"
        case 1009: name = "message too big"
        case 1010: name = "mandatory extension"
        case 1011: name = "internal error"
        case 1012: name = "service restart"
        case 1013: name = "try again later"
        case 1014: name = "bad gateway"
        case 1015: name = "TLS handshake failure"
        case 4001: name = "token expired"
        default: name = rawValue >= 3000 ? "application" : "unassigned"
        }
        return "\(rawValue) (\(name))"
    }
}
