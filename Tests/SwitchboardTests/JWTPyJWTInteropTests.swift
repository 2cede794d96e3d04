#if JWTSupport
import Foundation
import Switchboard
import SwitchboardTestSupport
import Testing

/// Tokens signed by PyJWT (an independent implementation) verify with every algorithm the
/// authenticator supports, from the key files a deployment would give it.
@Suite struct JWTPyJWTInteropTests {
    static let algorithms = ["HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256",
                             "ES256", "ES384", "ES512", "EdDSA"]

    @Test(arguments: algorithms)
    func pyJWTTokenVerifies(algorithm: String) async throws {
        let keys = try JWTTestKeys.load()
        let exp = TestTokens.unixTime(Date()) + 600
        let token = try TestTokens.pyjwt(algorithm: algorithm, keyFile: keys.privateKey(for: algorithm), claims: [
            "sub": "user-42", "name": "Alice", "exp": exp, "iat": exp - 600,
            "rooms": ["general", "team-*"], "admin": false, "plan": "pro",
        ])
        let source: JWTKeySource = algorithm.hasPrefix("HS") ? .secretFile(keys.secretFile)
                                                            : .publicKeyFile(keys.publicKey(for: algorithm))
        let authenticator = try await JWTAuthenticator(keys: source)
        let verified = try await authenticator.verify(token)
        #expect(verified.subject == "user-42")
        #expect(verified.name == "Alice")
        #expect(verified.expiresAt == Date(timeIntervalSince1970: TimeInterval(exp)))
        #expect(verified.claims["rooms"] == #"["general","team-*"]"#)
        #expect(verified.claims["admin"] == "false")
        #expect(verified.claims["plan"] == "pro")
        #expect(verified.claims["exp"] == "\(exp)")
        #expect(verified.userInfo["sub"] == "user-42")
        #expect(verified.userInfo["name"] == "Alice")
    }

    /// The same algorithm with another key pair (or secret) is a bad signature.
    @Test(arguments: algorithms)
    func pyJWTTokenFromAnotherKeyIsRefused(algorithm: String) async throws {
        let keys = try JWTTestKeys.load()
        let claims: [String: Any] = ["sub": "user-42", "exp": TestTokens.unixTime(Date()) + 600]
        let token: String
        let source: JWTKeySource
        if algorithm.hasPrefix("HS") {
            token = try TestTokens.pyjwt(algorithm: algorithm, keyFile: keys.secretFile, claims: claims)
            source = .secret(Array((JWTTestKeys.secret + "-other").utf8))
        } else {
            let secondKey = algorithm.hasPrefix("R") || algorithm.hasPrefix("P") || algorithm == "ES256" || algorithm == "EdDSA"
            guard secondKey else { return }  // one P-384 and one P-521 pair only: covered by the others' families
            token = try TestTokens.pyjwt(algorithm: algorithm, keyFile: keys.privateKey(for: algorithm, second: true), claims: claims)
            source = .publicKeyFile(keys.publicKey(for: algorithm))
        }
        let authenticator = try await JWTAuthenticator(keys: source)
        let error = await #expect(throws: JWTVerificationError.self) { try await authenticator.verify(token) }
        #expect(error?.code == "invalid_token")
        #expect(error?.message == "signature verification failed")
    }

    /// The five-line PyJWT issuer of the DocC article (read from the article itself) makes
    /// tokens the authenticator accepts from the same secret file.
    @Test func docCArticlePyJWTIssuerWorks() async throws {
        let keys = try JWTTestKeys.load()
        let article = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Sources/Switchboard/Switchboard.docc/VerifyingTokens.md")
        let text = try String(contentsOf: article, encoding: .utf8)
        let start = try #require(text.range(of: "```python\n"))
        let end = try #require(text.range(of: "\n```", range: start.upperBound..<text.endIndex))
        let snippet = String(text[start.upperBound..<end.lowerBound])
        #expect(snippet.split(separator: "\n").count == 5)
        #expect(snippet.contains("/etc/chat/jwt-secret"))
        let script = snippet.replacingOccurrences(of: "\"/etc/chat/jwt-secret\"", with: "sys.argv[1]")
            + "\nimport sys\nprint(socket_token('u-1', 'Ann'))\n"
        let token = try TestTokens.python("import sys\n" + script, arguments: [keys.secretFile])
        let verified = try await JWTAuthenticator(keys: .secretFile(keys.secretFile)).verify(token)
        #expect(verified.subject == "u-1")
        #expect(verified.name == "Ann")
        let lifetime = try #require(verified.expiresAt).timeIntervalSinceNow
        #expect(lifetime > 300 && lifetime <= 900)  // 900 s from when python ran; slack for a loaded machine
    }

    /// `name` falls back to `sub`; an empty `name` counts as none.
    @Test func nameFallsBackToSubject() async throws {
        let authenticator = try await JWTAuthenticator(keys: .secret(Array(JWTTestKeys.secret.utf8)))
        let plain = try await authenticator.verify(TestTokens.hs256(secret: JWTTestKeys.secret, claims: ["sub": "bob"]))
        #expect(plain.name == "bob")
        #expect(plain.expiresAt == nil)
        #expect(plain.userInfo == ["sub": "bob", "name": "bob"])
        let empty = try await authenticator.verify(TestTokens.hs256(secret: JWTTestKeys.secret, claims: ["sub": "bob", "name": ""]))
        #expect(empty.name == "bob")
    }
}

#endif
