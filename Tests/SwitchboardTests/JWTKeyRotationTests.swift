#if JWTSupport
import Foundation
import Switchboard
import SwitchboardTestSupport
import Testing

/// Keys: a JWKS picks its key by `kid` and holds several for rotation; `reload()` re-reads the
/// file and swaps the keys in one step, and a reload that fails keeps the keys in use.
@Suite struct JWTKeyRotationTests {
    private static func claims() -> [String: Any] { ["sub": "carol", "exp": TestTokens.unixTime(Date()) + 600] }

    private func token(_ algorithm: String, second: Bool = false, kid: String?) throws -> String {
        let keys = try JWTTestKeys.load()
        return try TestTokens.pyjwt(algorithm: algorithm, keyFile: keys.privateKey(for: algorithm, second: second),
                                    claims: Self.claims(), header: kid.map { ["kid": $0] } ?? [:])
    }

    @Test func jwksPicksTheKeyByKid() async throws {
        let keys = try JWTTestKeys.load()
        let jwks = try keys.writeJWKS([
            keys.jwk(publicKey: keys.publicKey(for: "RS256"), kid: "rsa-1"),
            keys.jwk(publicKey: keys.publicKey(for: "ES256"), kid: "ec-1"),
            keys.jwk(publicKey: keys.publicKey(for: "EdDSA"), kid: "ed-1"),
        ])
        let authenticator = try await JWTAuthenticator(keys: .jwksFile(jwks))
        #expect(try await authenticator.verify(token("RS256", kid: "rsa-1")).subject == "carol")
        #expect(try await authenticator.verify(token("PS256", kid: "rsa-1")).subject == "carol")
        #expect(try await authenticator.verify(token("ES256", kid: "ec-1")).subject == "carol")
        #expect(try await authenticator.verify(token("EdDSA", kid: "ed-1")).subject == "carol")
        // Without a kid, every key of the token's family is tried.
        #expect(try await authenticator.verify(token("ES256", kid: nil)).subject == "carol")
        // A kid names one key: another key's kid, or an unknown kid, is refused.
        let wrongKid = await #expect(throws: JWTVerificationError.self) { try await authenticator.verify(token("RS256", kid: "ec-1")) }
        #expect(wrongKid?.message == "no key for this kid and algorithm RS256")
        let unknownKid = await #expect(throws: JWTVerificationError.self) { try await authenticator.verify(token("RS256", kid: "rsa-9")) }
        #expect(unknownKid?.code == "invalid_token")
    }

    /// A JWK without `alg` verifies each algorithm of its family, whatever the first token
    /// used (jwt-kit alone would keep the first token's algorithm for that key); a JWK with
    /// `alg` verifies that one only.
    @Test func jwkAlgorithmIsChosenPerToken() async throws {
        let keys = try JWTTestKeys.load()
        let open = try await JWTAuthenticator(keys: .jwksFile(keys.writeJWKS([keys.jwk(publicKey: keys.publicKey(for: "RS256"), kid: "k")])))
        for algorithm in ["RS256", "PS256", "RS512", "RS256"] {
            #expect(try await open.verify(token(algorithm, kid: "k")).subject == "carol", "\(algorithm)")
        }
        let pinned = try await JWTAuthenticator(keys: .jwksFile(keys.writeJWKS([
            keys.jwk(publicKey: keys.publicKey(for: "RS256"), kid: "k", alg: "RS256")])))
        #expect(try await pinned.verify(token("RS256", kid: "k")).subject == "carol")
        await #expect(throws: JWTVerificationError.self) { try await pinned.verify(token("PS256", kid: "k")) }
    }

    @Test func jwksHoldsOldAndNewKeysDuringRotation() async throws {
        let keys = try JWTTestKeys.load()
        let path = try keys.writeJWKS([keys.jwk(publicKey: keys.publicKey(for: "RS256"), kid: "old")])
        let authenticator = try await JWTAuthenticator(keys: .jwksFile(path))
        let oldToken = try token("RS256", kid: "old")
        let newToken = try token("RS256", second: true, kid: "new")
        #expect(try await authenticator.verify(oldToken).subject == "carol")
        await #expect(throws: JWTVerificationError.self) { try await authenticator.verify(newToken) }

        // Publish the new key beside the old one: both verify after reload.
        let both = try keys.writeJWKS([keys.jwk(publicKey: keys.publicKey(for: "RS256"), kid: "old"),
                                       keys.jwk(publicKey: keys.publicKey(for: "RS256", second: true), kid: "new")])
        try FileManager.default.removeItem(atPath: path)
        try FileManager.default.moveItem(atPath: both, toPath: path)
        try await authenticator.reload()
        #expect(try await authenticator.verify(oldToken).subject == "carol")
        #expect(try await authenticator.verify(newToken).subject == "carol")

        // Retire the old key.
        let newOnly = try keys.writeJWKS([keys.jwk(publicKey: keys.publicKey(for: "RS256", second: true), kid: "new")])
        try FileManager.default.removeItem(atPath: path)
        try FileManager.default.moveItem(atPath: newOnly, toPath: path)
        try await authenticator.reload()
        await #expect(throws: JWTVerificationError.self) { try await authenticator.verify(oldToken) }
        #expect(try await authenticator.verify(newToken).subject == "carol")
    }

    @Test func failedReloadKeepsTheKeysInUse() async throws {
        let keys = try JWTTestKeys.load()
        let directory = try TestTemporaryDirectory.make(prefix: "jwt-reload").path
        let secretPath = directory + "/secret"
        try Data("first-secret-0123456789abcdef0123456789\n".utf8).write(to: URL(fileURLWithPath: secretPath))
        let secretAuthenticator = try await JWTAuthenticator(keys: .secretFile(secretPath))
        let first = TestTokens.hs256(secret: "first-secret-0123456789abcdef0123456789", claims: Self.claims())
        for broken in ["", "\n"] {
            try Data(broken.utf8).write(to: URL(fileURLWithPath: secretPath))
            await #expect(throws: (any Error).self) { try await secretAuthenticator.reload() }
            #expect(try await secretAuthenticator.verify(first).subject == "carol")
        }
        try FileManager.default.removeItem(atPath: secretPath)
        await #expect(throws: (any Error).self) { try await secretAuthenticator.reload() }
        #expect(try await secretAuthenticator.verify(first).subject == "carol")

        let jwksPath = try keys.writeJWKS([keys.jwk(publicKey: keys.publicKey(for: "ES256"), kid: "ec")])
        let jwksAuthenticator = try await JWTAuthenticator(keys: .jwksFile(jwksPath))
        let ecToken = try token("ES256", kid: "ec")
        for broken in ["not json", #"{"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA","kid":"ec"}]}"#, #"{"keys":[]}"#, "[]"] {
            try Data(broken.utf8).write(to: URL(fileURLWithPath: jwksPath))
            await #expect(throws: (any Error).self) { try await jwksAuthenticator.reload() }
            #expect(try await jwksAuthenticator.verify(ecToken).subject == "carol", "after \(broken)")
        }
    }

    @Test func secretFileLosesOneTrailingNewlineOnly() async throws {
        let keys = try JWTTestKeys.load()
        let authenticator = try await JWTAuthenticator(keys: .secretFile(keys.secretFile))
        #expect(try await authenticator.verify(TestTokens.hs256(secret: JWTTestKeys.secret, claims: Self.claims())).subject == "carol")
        await #expect(throws: JWTVerificationError.self) {
            try await authenticator.verify(TestTokens.hs256(secret: JWTTestKeys.secret + "\n", claims: Self.claims()))
        }
    }

    @Test func unusableKeyFilesAreRefusedAtStart() async throws {
        let keys = try JWTTestKeys.load()
        // A private key: the server gets the public one only.
        let privateKey = await #expect(throws: (any Error).self) {
            try await JWTAuthenticator(keys: .publicKeyFile(keys.privateKey(for: "RS256")))
        }
        #expect("\(privateKey.map { "\($0)" } ?? "")".contains("private key"))
        // Not a key, no file, an empty secret.
        await #expect(throws: (any Error).self) { try await JWTAuthenticator(keys: .publicKeyFile(keys.secretFile)) }
        await #expect(throws: (any Error).self) { try await JWTAuthenticator(keys: .publicKeyFile(keys.directory + "/missing.pem")) }
        await #expect(throws: (any Error).self) { try await JWTAuthenticator(keys: .secret([])) }
        // HMAC secrets shorter than the hash (RFC 7518 §3.2): none under 32 bytes, HS256 only
        // from 32 to 47.
        await #expect(throws: (any Error).self) { try await JWTAuthenticator(keys: .secret(Array("short-secret".utf8))) }
        let secret40 = String(repeating: "k", count: 40)
        let hs256Only = try await JWTAuthenticator(keys: .secret(Array(secret40.utf8)))
        #expect(try await hs256Only.verify(TestTokens.hs256(secret: secret40, claims: Self.claims())).subject == "carol")
        let secretFile = keys.directory + "/secret40.txt"
        try Data(secret40.utf8).write(to: URL(fileURLWithPath: secretFile))
        let hs384 = try TestTokens.pyjwt(algorithm: "HS384", keyFile: secretFile, claims: Self.claims())
        let refused = await #expect(throws: JWTVerificationError.self) { try await hs256Only.verify(hs384) }
        #expect(refused?.message == "no key for algorithm HS384")
        // A JWKS key without kid.
        let noKid = try keys.writeJWKS([#"{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#])
        await #expect(throws: (any Error).self) { try await JWTAuthenticator(keys: .jwksFile(noKid)) }
    }
}

#endif

#if JWTSupport
/// A key source's descriptions show where keys come from, never an in-memory secret.
@Suite struct JWTKeySourceDescriptionTests {
    @Test func inMemorySecretIsNeverShown() {
        let secret = "in-memory-secret-0123456789abcdef0123456789"
        let source = JWTKeySource.secret(Array(secret.utf8))
        var dumped = ""
        dump(source, to: &dumped)
        let bytesText = "\(Array(secret.utf8))"
        for text in [source.description, source.debugDescription, "\(source)", String(reflecting: source), dumped] {
            #expect(!text.contains(secret) && !text.contains(bytesText) && !text.contains("105, 110, 45"), "\(text)")
            #expect(text.contains("redacted"), "\(text)")
        }
        #expect(JWTKeySource.jwksFile("/etc/keys.json").description == "JWKS file /etc/keys.json")
        #expect(JWTKeySource.secretFile("/etc/secret").description == "HMAC secret file /etc/secret")
        #expect(JWTKeySource.publicKeyFile("/etc/key.pem").description == "public key file /etc/key.pem")
    }
}
#endif
