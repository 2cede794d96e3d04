#if JWTSupport
import Foundation

/// The identity a verified token carries.
///
/// Every claim other than the registered ones the authenticator checked is kept in ``claims``;
/// ``userInfo`` is what ``JWTAuthenticator/authenticate(_:)`` hands to the connection
/// (``WebSocketConnection/userInfo``), where applications read `userInfo["sub"]` and
/// `userInfo["name"]`.
public struct VerifiedToken: Sendable {
    /// The `sub` claim: who the token is for, the connection's identity. Always present (a
    /// token without a string `sub` is refused).
    public var subject: String
    /// The `name` claim when it is a non-empty string, else ``subject``: what to display.
    public var name: String
    /// The `exp` claim, when the token has one.
    public var expiresAt: Date?
    /// Every claim but `sub` and `name`: strings as they are, other values as compact JSON text
    /// with sorted keys (a `rooms` array arrives as `["a","b*"]`, `exp` as `1767225600`).
    public var claims: [String: String]

    /// ``claims`` plus `"sub"` (``subject``) and `"name"` (``name``).
    public var userInfo: [String: String] {
        var info = claims
        info["sub"] = subject
        info["name"] = name
        return info
    }

    /// A verified identity (the authenticator makes these; tests may too).
    public init(subject: String, name: String? = nil, expiresAt: Date? = nil, claims: [String: String] = [:]) {
        self.subject = subject
        self.name = name ?? subject
        self.expiresAt = expiresAt
        self.claims = claims
    }
}

#endif
