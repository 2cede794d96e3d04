#if JWTSupport

/// Why a token was refused by ``JWTAuthenticator/verify(_:)``.
///
/// ``code`` is a stable machine-readable value (the `code` of the `401` JSON body);
/// ``message`` is for people and logs. Neither ever contains the token or key material, so
/// both can be logged and sent back to the client.
public struct JWTVerificationError: Error, Sendable, CustomStringConvertible {
    /// `invalid_token` (bad signature, an algorithm the key does not allow, bad format or JSON,
    /// an unknown `crit` header, more than 8 KiB, a missing `sub`), `token_expired`,
    /// `token_not_yet_valid`, `invalid_issuer` or `invalid_audience`.
    public var code: String
    /// What was wrong, without the token.
    public var message: String

    /// An error with this code and message (the message must not contain the token).
    public init(code: String, message: String) {
        self.code = code
        self.message = message
    }

    /// `"<code>: <message>"`.
    public var description: String { "\(code): \(message)" }

    static func invalid(_ message: String) -> Self { .init(code: "invalid_token", message: message) }
}

#endif
