#if JWTSupport
import Foundation

/// The registered claims of a token whose signature is valid (RFC 7519 §4.1), checked with the
/// authenticator's clock only: jwt-kit is given a payload type whose check does nothing, so no
/// other clock decides.
struct JWTClaimsCheck: Sendable {
    var issuer: String?
    var audience: String?
    /// Allowed clock skew, in seconds.
    var leeway: TimeInterval

    /// The identity of `payload`, or the first claim that fails.
    ///
    /// `exp`/`nbf` must be numbers (seconds since 1970) when present; `iss` must equal
    /// ``issuer`` when that is set; `aud` (a string or an array of strings) must contain
    /// ``audience`` when that is set, and a token with an `aud` is refused when no audience is
    /// set (RFC 7519 §4.1.3: a recipient that is not named must reject it); `sub` must be a
    /// non-empty string.
    func verifiedToken(_ payload: [String: Any], now: Date) throws(JWTVerificationError) -> VerifiedToken {
        var expiresAt: Date?
        if let exp = payload["exp"] {
            guard let seconds = Self.numericDate(exp) else { throw .invalid("exp is not a number") }
            let date = Date(timeIntervalSince1970: seconds)
            if now.timeIntervalSince(date) > leeway { throw .init(code: "token_expired", message: "the token has expired") }
            expiresAt = date
        }
        if let nbf = payload["nbf"] {
            guard let seconds = Self.numericDate(nbf) else { throw .invalid("nbf is not a number") }
            if Date(timeIntervalSince1970: seconds).timeIntervalSince(now) > leeway {
                throw .init(code: "token_not_yet_valid", message: "the token is not valid yet (nbf)")
            }
        }
        if let issuer, payload["iss"] as? String != issuer {
            throw .init(code: "invalid_issuer", message: "the token's issuer (iss) is not the expected one")
        }
        if let aud = payload["aud"] {
            let audiences: [String]
            if let one = aud as? String {
                audiences = [one]
            } else if let many = aud as? [Any], many.allSatisfy({ $0 is String }) {
                audiences = many.compactMap { $0 as? String }
            } else {
                throw .init(code: "invalid_audience", message: "aud is neither a string nor an array of strings")
            }
            guard let audience, audiences.contains(audience) else {
                throw .init(code: "invalid_audience", message: "the token is not meant for this server (aud)")
            }
        } else if audience != nil {
            throw .init(code: "invalid_audience", message: "the token has no audience (aud)")
        }
        guard let subject = payload["sub"] as? String, !subject.isEmpty else {
            throw .invalid("the token has no subject (sub)")
        }
        let name = (payload["name"] as? String).flatMap { $0.isEmpty ? nil : $0 }
        var claims: [String: String] = [:]
        for (key, value) in payload where key != "sub" && key != "name" {
            claims[key] = value as? String ?? JWTCompactToken.jsonText(value)
        }
        return VerifiedToken(subject: subject, name: name, expiresAt: expiresAt, claims: claims)
    }

    /// A JSON number as seconds (RFC 7519 §2 NumericDate), or nil for anything else; booleans
    /// arrive as numbers from JSONSerialization and are told apart by their JSON text.
    static func numericDate(_ value: Any) -> TimeInterval? {
        guard let number = value as? NSNumber, !(value is String) else { return nil }
        let text = JWTCompactToken.jsonText(value)
        guard text != "true", text != "false" else { return nil }
        let seconds = number.doubleValue
        return seconds.isFinite ? seconds : nil
    }
}

#endif
