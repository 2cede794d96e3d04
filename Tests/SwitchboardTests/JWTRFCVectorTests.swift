#if JWTSupport
import Foundation
@testable import Switchboard
import SwitchboardTestSupport
import Testing

/// The signature examples of RFC 7515 (JWS) appendix A and RFC 8037 (EdDSA) appendix A,
/// checked apart from the claims (their payloads have no `sub`, and RFC 8037's is not JSON),
/// then through `verify` with a clock injected before their `exp`.
@Suite struct JWTRFCVectorTests {
    /// `{"iss":"joe",\r\n "exp":1300819380,\r\n "http://example.com/is_root":true}`, the payload
    /// of RFC 7515 A.1 to A.5.
    static let payload = "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ"
    /// A moment before that payload's `exp`.
    static let beforeExpiry = Date(timeIntervalSince1970: 1_300_819_000)

    /// RFC 7515 A.2.1: the RSA public key (n, e) and the RS256 JWS.
    static let rs256Key = #"{"kty":"RSA","kid":"a2","e":"AQAB","n":"ofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd_wWJcyQoTbji9k0l8W26mPddxHmfHQp-Vaw-4qPCJrcS2mJPMEzP1Pt0Bm4d4QlL-yRT-SFd2lZS-pCgNMsD1W_YpRPEwOWvG6b32690r2jZ47soMZo9wGzjb_7OMg0LOL-bSf63kpaSHSXndS5z5rexMdbBYUsLA9e-KXBdQOS-UTo7WTBEMa2R2CapHg665xsmtdVMTBQY4uDZlxvb3qCo5ZwKh9kG4LT6_I5IhlJH7aGhyxXFvUK-DWNmoudF8NAco9_h9iaGNj8q2ethFkMLs91kzk2PAcDTW9gb54h4FRWyuXpoQ"}"#
    static let rs256Token = "eyJhbGciOiJSUzI1NiJ9." + payload + "."
        + "cC4hiUPoj9Eetdgtv3hF80EGrhuB__dzERat0XF9g2VtQgr9PJbu3XOiZj5RZmh7AAuHIm4Bh-0Qc_lF5YKt_O8W2Fp5jujGbds9uJdbF9CUAr7t1dnZcAcQjbKBYNX4BAynRFdiuB--f_nZLgrnbyTyWzO75vRK5h6xBArLIARNPvkSjtQBMHlb1L07Qe7K0GarZRmB_eSN9383LcOLn6_dO--xi12jzDwusC-eOkHWEsqtFZESc6BfI7noOPqvhJ1phCnvWh6IeYI2w9QOYEUipUTI8np6LbgGY9Fs98rqVt5AXLIhWkWywlVmtVrBp0igcN_IoypGlUPQGe77Rw"

    /// RFC 7515 A.3.1: the P-256 public key (x, y) and the ES256 JWS.
    static let es256Key = #"{"kty":"EC","kid":"a3","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}"#
    static let es256Token = "eyJhbGciOiJFUzI1NiJ9." + payload + "."
        + "DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q"

    /// RFC 8037 A.2 and A.4: the Ed25519 public key and the JWS of "Example of Ed25519 signing".
    static let ed25519Key = #"{"kty":"OKP","kid":"a4","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#
    static let ed25519Token = "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc."
        + "hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg"

    /// RFC 7515 A.5: the unsecured JWS (`alg: none`, empty signature).
    static let unsecuredToken = "eyJhbGciOiJub25lIn0." + payload + "."

    private func authenticator(_ jwk: String, now: Date = beforeExpiry) async throws -> JWTAuthenticator {
        let keys = try JWTTestKeys.load()
        return try await JWTAuthenticator(keys: .jwksFile(keys.writeJWKS([jwk])), now: { now })
    }

    /// Flips one bit of the signature's first byte.
    private func corrupted(_ token: String) -> String {
        let dot = token.lastIndex(of: ".")!
        let first = token[token.index(after: dot)]
        let replacement: Character = first == "A" ? "B" : "A"
        return String(token[...dot]) + String(replacement) + token[token.index(dot, offsetBy: 2)...]
    }

    @Test func rfc7515RS256ExampleSignatureVerifies() async throws {
        let authenticator = try await authenticator(Self.rs256Key)
        try authenticator.verifySignature(Self.rs256Token)
        #expect(throws: JWTVerificationError.self) { try authenticator.verifySignature(corrupted(Self.rs256Token)) }
    }

    @Test func rfc7515ES256ExampleSignatureVerifies() async throws {
        let authenticator = try await authenticator(Self.es256Key)
        try authenticator.verifySignature(Self.es256Token)
        #expect(throws: JWTVerificationError.self) { try authenticator.verifySignature(corrupted(Self.es256Token)) }
    }

    @Test func rfc8037Ed25519ExampleSignatureVerifies() async throws {
        let authenticator = try await authenticator(Self.ed25519Key)
        try authenticator.verifySignature(Self.ed25519Token)
        #expect(throws: JWTVerificationError.self) { try authenticator.verifySignature(corrupted(Self.ed25519Token)) }
        // As a JWT it is refused: its payload is text, not a claims set.
        let error = await #expect(throws: JWTVerificationError.self) { try await authenticator.verify(Self.ed25519Token) }
        #expect(error?.code == "invalid_token")
        #expect(error?.message == "the payload is not a JSON object")
    }

    /// Through `verify`, the RFC examples pass the signature and then fail on the claims:
    /// no `sub` before their `exp`, expired after it (the injected clock decides, not the
    /// machine's: 2011 is long past).
    @Test func rfcExamplesAreJudgedByTheInjectedClock() async throws {
        for (jwk, token) in [(Self.rs256Key, Self.rs256Token), (Self.es256Key, Self.es256Token)] {
            let before = try await authenticator(jwk)
            let missingSubject = await #expect(throws: JWTVerificationError.self) { try await before.verify(token) }
            #expect(missingSubject?.message == "the token has no subject (sub)")
            let after = try await authenticator(jwk, now: Date(timeIntervalSince1970: 1_300_819_380 + 6))
            let expired = await #expect(throws: JWTVerificationError.self) { try await after.verify(token) }
            #expect(expired?.code == "token_expired")
            let withinLeeway = try await authenticator(jwk, now: Date(timeIntervalSince1970: 1_300_819_380 + 4))
            let stillNoSubject = await #expect(throws: JWTVerificationError.self) { try await withinLeeway.verify(token) }
            #expect(stillNoSubject?.message == "the token has no subject (sub)")
        }
    }

    @Test func rfc7515UnsecuredExampleIsRefused() async throws {
        for jwk in [Self.rs256Key, Self.es256Key, Self.ed25519Key] {
            let authenticator = try await authenticator(jwk)
            let error = #expect(throws: JWTVerificationError.self) { try authenticator.verifySignature(Self.unsecuredToken) }
            #expect(error?.code == "invalid_token")
            #expect(error?.message == "unsigned tokens (alg none) are not accepted")
        }
        let secret = try await JWTAuthenticator(keys: .secret(Array(JWTTestKeys.secret.utf8)), now: { Self.beforeExpiry })
        #expect(throws: JWTVerificationError.self) { try secret.verifySignature(Self.unsecuredToken) }
    }
}

#endif
