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
    private let claimsCheck: JWTClaimsCheck
    private let now: @Sendable () -> Date
    /// The keys in use; ``reload()`` replaces them in one step.
    private let keys: Locked<JWTKeySet>

    /// Loads the keys of `keys` and returns an authenticator that accepts tokens signed by them.
    ///
    /// - Parameters:
    ///   - keys: where the verification keys come from; they also decide which `alg` values a
    ///     token may carry.
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
        let (seconds, attoseconds) = leeway.components
        self.claimsCheck = JWTClaimsCheck(issuer: issuer, audience: audience,
                                          leeway: max(0, Double(seconds) + Double(attoseconds) * 1e-18))
        self.now = now
        self.keys = Locked(try await JWTKeySet.load(keys))
    }

    /// Verifies `token` (the compact serialization, without `Bearer `) and returns its identity.
    ///
    /// - Throws: ``JWTVerificationError``; its ``JWTVerificationError/code`` says which check failed.
    ///
    /// In order: the pre-checks of the compact form (size, base64url, JSON objects, `alg`, `crit`),
    /// the signature (jwt-kit, with the keys that fit `alg` and `kid`), then the claims with the
    /// injected clock. A bad signature is reported before any claim, so an attacker learns nothing
    /// from the claims of a forged token.
    public func verify(_ token: String) async throws(JWTVerificationError) -> VerifiedToken {
        let parsed = try JWTCompactToken(token)
        let payload = try parsed.payloadObject()
        try checkSignature(parsed)
        return try claimsCheck.verifiedToken(payload, now: now())
    }

    /// The pre-checks and the signature only, whatever the payload holds (the RFC examples'
    /// payloads have no `sub`, RFC 8037's is not even JSON): what the tests check apart from claims.
    func verifySignature(_ token: String) throws(JWTVerificationError) {
        try checkSignature(JWTCompactToken(token))
    }

    /// Succeeds when one of the keys fitting the token's `alg` and `kid` verifies its signature
    /// (jwt-kit computes it).
    private func checkSignature(_ token: JWTCompactToken) throws(JWTVerificationError) {
        let candidates = keys.withLock { $0 }.verifiers(algorithm: token.algorithm, keyID: token.keyID)
        guard !candidates.isEmpty else {
            throw .invalid(token.keyID == nil ? "no key for algorithm \(token.algorithm)"
                                              : "no key for this kid and algorithm \(token.algorithm)")
        }
        for key in candidates where (try? key.verify(token.signature, signs: token.signingInput)) == true {
            return
        }
        throw .invalid("signature verification failed")
    }

    /// The route hook: verifies the request's bearer token (`WebSocketUpgradeRequest.bearerToken`:
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
            return .accept(userInfo: verified.userInfo, expiresAt: verified.expiresAt)
        } catch {
            return .reject(.error(status: 401, message: error.message, type: .authentication, code: error.code))
        }
    }

    /// Reads the key files again and swaps the keys in at once; on failure the old keys stay in use.
    ///
    /// The example servers call it on `SIGHUP`. In-memory secrets are kept as they are.
    /// - Throws: when a file cannot be read or holds no usable key (nothing changed then).
    public func reload() async throws {
        let loaded = try await JWTKeySet.load(source)
        keys.withLock { $0 = loaded }
    }
}

#endif
