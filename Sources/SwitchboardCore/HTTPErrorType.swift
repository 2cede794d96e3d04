/// The `type` field of a JSON error body (``HTTPResponse/error(status:message:type:code:)``).
///
/// An open set: the named members are the vocabulary Switchboard itself uses, one per kind of
/// rejection; any other name can be made from a string literal or ``init(rawValue:)``.
///
/// | member | raw value | statuses |
/// |---|---|---|
/// | ``invalidRequest`` | `invalid_request_error` | 400, 405, 408, 411, 413, 426, 431 |
/// | ``authentication`` | `authentication_error` | 401 |
/// | ``permission`` | `permission_error` | 403 |
/// | ``notFound`` | `not_found_error` | 404 |
/// | ``rateLimit`` | `rate_limit_error` | 429 |
/// | ``internalServer`` | `internal_server_error` | 500 |
/// | ``overloaded`` | `overloaded_error` | 503 |
public struct HTTPErrorType: RawRepresentable, Sendable, Hashable, ExpressibleByStringLiteral,
    CustomStringConvertible {
    /// The name as it appears in the body, e.g. `invalid_request_error`.
    public var rawValue: String

    /// Creates a type from its name as it appears in the body (not validated).
    public init(rawValue: String) { self.rawValue = rawValue }

    /// Creates a type from a string literal: `"billing_error"`.
    public init(stringLiteral value: String) { self.rawValue = value }

    /// The name, as in the body.
    public var description: String { rawValue }

    /// The request is malformed, its body unacceptable, or not a valid WebSocket upgrade (400,
    /// 405, 408, 411, 413, 426, 431).
    public static let invalidRequest = Self(rawValue: "invalid_request_error")
    /// Credentials are missing or wrong (401).
    public static let authentication = Self(rawValue: "authentication_error")
    /// The caller is known but not allowed, e.g. an origin outside the allow-list (403).
    public static let permission = Self(rawValue: "permission_error")
    /// No route for the path (404).
    public static let notFound = Self(rawValue: "not_found_error")
    /// Too many requests (429).
    public static let rateLimit = Self(rawValue: "rate_limit_error")
    /// The server failed (500).
    public static let internalServer = Self(rawValue: "internal_server_error")
    /// At capacity or shutting down (503).
    public static let overloaded = Self(rawValue: "overloaded_error")
}
