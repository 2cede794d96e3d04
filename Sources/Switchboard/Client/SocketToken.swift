import Foundation

/// A bearer token and when it expires: what a ``SocketAdapter``'s token provider returns.
///
/// The adapter sends ``value`` as `Authorization: Bearer` on every connect attempt and asks
/// the provider for a new token at 80% of the token's lifetime (from when it was obtained to
/// ``expiresAt``). Its `description` never shows the value, so a token printed or logged by
/// accident does not leak: compare tokens with `==`, read ``value`` only to send it.
public struct SocketToken: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The token itself (a JWT, an opaque session token). Secret: never logged by the library.
    public var value: String
    /// When the server stops accepting it (a JWT's `exp`); nil for a token that does not
    /// expire, which is then never refreshed in-band (a new one is still asked for before each
    /// connect attempt).
    public var expiresAt: Date?

    /// A token `value` valid until `expiresAt` (nil: no expiry known).
    public init(_ value: String, expiresAt: Date? = nil) {
        self.value = value
        self.expiresAt = expiresAt
    }

    /// `SocketToken(<redacted>, expiresAt: …)`: the value never appears.
    public var description: String {
        "SocketToken(<redacted>, expiresAt: \(expiresAt.map { "\($0)" } ?? "none"))"
    }

    /// The same as ``description``: the value never appears.
    public var debugDescription: String { description }
}
