#if JWTSupport
import Foundation
import Switchboard
import SwitchboardTestSupport
import Testing

/// Every forged or unacceptable token of issue 33 is refused, with the code the `401` body
/// carries, and the refusal never repeats the token.
@Suite struct JWTForgedTokenTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let secret = JWTTestKeys.secret

    private static func claims(_ extra: [String: Any] = [:]) -> [String: Any] {
        var claims: [String: Any] = ["sub": "alice", "exp": TestTokens.unixTime(now) + 300]
        for (key, value) in extra { claims[key] = value }
        return claims
    }

    private func authenticator(issuer: String? = nil, audience: String? = nil) async throws -> JWTAuthenticator {
        try await JWTAuthenticator(keys: .secret(Array(Self.secret.utf8)), issuer: issuer, audience: audience,
                                   now: { Self.now })
    }

    /// The error `authenticator` refuses `token` with; records a failure if it accepts it or if
    /// the error's text contains the token or its signature.
    private func refusal(_ token: String, by authenticator: JWTAuthenticator,
                         sourceLocation: SourceLocation = #_sourceLocation) async -> JWTVerificationError? {
        do {
            let accepted = try await authenticator.verify(token)
            Issue.record("accepted as \(accepted.subject)", sourceLocation: sourceLocation)
            return nil
        } catch {
            let signature = token.split(separator: ".", omittingEmptySubsequences: false).last.map(String.init) ?? ""
            for text in [error.message, error.description, "\(error)", String(reflecting: error)] {
                #expect(!text.contains(token), "the token in \(text)", sourceLocation: sourceLocation)
                if signature.count > 8 { #expect(!text.contains(signature), sourceLocation: sourceLocation) }
            }
            return error
        }
    }

    /// The three parts of a compact token.
    private func parts(_ token: String) -> [String] { token.split(separator: ".", omittingEmptySubsequences: false).map(String.init) }

    @Test func validTokenIsAcceptedAsAControl() async throws {
        let verified = try await authenticator().verify(TestTokens.hs256(secret: Self.secret, claims: Self.claims()))
        #expect(verified.subject == "alice")
    }

    @Test func algNoneIsRefused() async throws {
        let authenticator = try await authenticator()
        let payload = TestTokens.base64URL(TestTokens.json(Self.claims()))
        for alg in ["none", "None", "NONE", "nOnE"] {
            let header = TestTokens.base64URL(TestTokens.json(["alg": alg, "typ": "JWT"]))
            for signature in ["", TestTokens.base64URL(Array("x".utf8))] {
                let error = await refusal(header + "." + payload + "." + signature, by: authenticator)
                #expect(error?.code == "invalid_token")
                #expect(error?.message == "unsigned tokens (alg none) are not accepted")
            }
        }
    }

    /// The classic key-confusion forgery: the RSA public key is public, so an attacker signs
    /// HS256 with its PEM bytes as the HMAC secret, hoping the server uses "the key" for whatever
    /// `alg` says. The key's family (RSA) allows RS*/PS256 only.
    @Test func hs256SignedWithTheRSAPublicKeyBytesIsRefused() async throws {
        let keys = try JWTTestKeys.load()
        let publicKeyBytes = try Array(Data(contentsOf: URL(fileURLWithPath: keys.publicKey(for: "RS256"))))
        let forged = TestTokens.hs256(secret: publicKeyBytes, claims: Self.claims())
        let fromPEM = try await JWTAuthenticator(keys: .publicKeyFile(keys.publicKey(for: "RS256")), now: { Self.now })
        let error = await refusal(forged, by: fromPEM)
        #expect(error?.code == "invalid_token")
        #expect(error?.message == "no key for algorithm HS256")
        // Same with the key in a JWKS, with and without the token naming its kid.
        let jwks = try keys.writeJWKS([keys.jwk(publicKey: keys.publicKey(for: "RS256"), kid: "rsa")])
        let fromJWKS = try await JWTAuthenticator(keys: .jwksFile(jwks), now: { Self.now })
        #expect(await refusal(forged, by: fromJWKS)?.code == "invalid_token")
        let withKid = TestTokens.hs256(secret: publicKeyBytes, claims: Self.claims(), header: ["kid": "rsa"])
        #expect(await refusal(withKid, by: fromJWKS)?.message == "no key for this kid and algorithm HS256")
        // And the other way round: a secret key does not take RS256.
        let rs256 = try TestTokens.pyjwt(algorithm: "RS256", keyFile: keys.privateKey(for: "RS256"), claims: Self.claims())
        #expect(await refusal(rs256, by: try await authenticator())?.message == "no key for algorithm RS256")
    }

    /// A token whose `alg` names another algorithm of the key's family than the one it was
    /// signed with (RS256 signature, RS512 header) is a bad signature, not a pass.
    @Test func algorithmSwappedWithinTheFamilyIsRefused() async throws {
        let keys = try JWTTestKeys.load()
        let token = try TestTokens.pyjwt(algorithm: "RS256", keyFile: keys.privateKey(for: "RS256"), claims: Self.claims())
        let parts = parts(token)
        let header = TestTokens.base64URL(TestTokens.json(["alg": "RS512", "typ": "JWT"]))
        let authenticator = try await JWTAuthenticator(keys: .publicKeyFile(keys.publicKey(for: "RS256")), now: { Self.now })
        #expect(await refusal(header + "." + parts[1] + "." + parts[2], by: authenticator)?.message == "signature verification failed")
    }

    /// Signatures of every length, for every key type, are refused without trapping (jwt-kit
    /// parses ECDSA signatures, which have a fixed size, before checking them).
    @Test func garbageSignaturesAreRefusedForEveryKeyType() async throws {
        let keys = try JWTTestKeys.load()
        let payload = TestTokens.base64URL(TestTokens.json(Self.claims()))
        for algorithm in JWTPyJWTInteropTests.algorithms {
            let source: JWTKeySource = algorithm.hasPrefix("HS") ? .secretFile(keys.secretFile)
                                                                : .publicKeyFile(keys.publicKey(for: algorithm))
            let authenticator = try await JWTAuthenticator(keys: source, now: { Self.now })
            let header = TestTokens.base64URL(TestTokens.json(["alg": algorithm]))
            for length in [1, 2, 31, 32, 63, 64, 65, 96, 132, 255, 256, 257, 512, 4000] {
                let signature = TestTokens.base64URL((0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) })
                let error = await refusal(header + "." + payload + "." + signature, by: authenticator)
                #expect(error?.message == "signature verification failed", "\(algorithm), \(length) bytes")
            }
        }
    }

    @Test func unknownCritIsRefused() async throws {
        let authenticator = try await authenticator()
        let token = TestTokens.hs256(secret: Self.secret, claims: Self.claims(), header: ["crit": ["exp-ext"], "exp-ext": true])
        let error = await refusal(token, by: authenticator)
        #expect(error?.code == "invalid_token")
        #expect(error?.message == "unsupported critical header parameter (crit)")
        let empty = TestTokens.hs256(secret: Self.secret, claims: Self.claims(), header: ["crit": [String]()])
        #expect(await refusal(empty, by: authenticator)?.code == "invalid_token")
    }

    @Test func expiredTokenIsRefused() async throws {
        let authenticator = try await authenticator()
        let expired = TestTokens.hs256(secret: Self.secret, claims: Self.claims(["exp": TestTokens.unixTime(Self.now) - 6]))
        let error = await refusal(expired, by: authenticator)
        #expect(error?.code == "token_expired")
        // Within the 5 s leeway it still passes; a non-numeric exp is malformed.
        let skewed = TestTokens.hs256(secret: Self.secret, claims: Self.claims(["exp": TestTokens.unixTime(Self.now) - 4]))
        #expect(try await authenticator.verify(skewed).subject == "alice")
        for bad: Any in ["1800000000", true, ["x"]] {
            let token = TestTokens.hs256(secret: Self.secret, claims: Self.claims(["exp": bad]))
            #expect(await refusal(token, by: authenticator)?.message == "exp is not a number")
        }
    }

    @Test func notYetValidTokenIsRefused() async throws {
        let authenticator = try await authenticator()
        let early = TestTokens.hs256(secret: Self.secret, claims: Self.claims(["nbf": TestTokens.unixTime(Self.now) + 60]))
        #expect(await refusal(early, by: authenticator)?.code == "token_not_yet_valid")
        let skewed = TestTokens.hs256(secret: Self.secret, claims: Self.claims(["nbf": TestTokens.unixTime(Self.now) + 4]))
        #expect(try await authenticator.verify(skewed).subject == "alice")
    }

    @Test func wrongIssuerIsRefused() async throws {
        let authenticator = try await authenticator(issuer: "https://auth.example.com")
        for claims in [Self.claims(["iss": "https://evil.example.com"]), Self.claims(), Self.claims(["iss": ["https://auth.example.com"]])] {
            let token = TestTokens.hs256(secret: Self.secret, claims: claims)
            #expect(await refusal(token, by: authenticator)?.code == "invalid_issuer")
        }
        let good = TestTokens.hs256(secret: Self.secret, claims: Self.claims(["iss": "https://auth.example.com"]))
        #expect(try await authenticator.verify(good).claims["iss"] == "https://auth.example.com")
    }

    @Test func wrongAudienceIsRefused() async throws {
        let authenticator = try await authenticator(audience: "chat")
        for aud: Any? in ["billing", ["billing", "admin"], nil, 7, ["chat", 7]] {
            let token = TestTokens.hs256(secret: Self.secret, claims: Self.claims(aud.map { ["aud": $0] } ?? [:]))
            #expect(await refusal(token, by: authenticator)?.code == "invalid_audience")
        }
        for aud: Any in ["chat", ["billing", "chat"]] {
            let token = TestTokens.hs256(secret: Self.secret, claims: Self.claims(["aud": aud]))
            #expect(try await authenticator.verify(token).subject == "alice")
        }
        // RFC 7519 §4.1.3: a token meant for a named audience is refused by a server that has none.
        let noAudience = try await self.authenticator()
        let addressed = TestTokens.hs256(secret: Self.secret, claims: Self.claims(["aud": "chat"]))
        #expect(await refusal(addressed, by: noAudience)?.code == "invalid_audience")
    }

    @Test func tamperedHeaderIsRefused() async throws {
        let authenticator = try await authenticator()
        let parts = parts(TestTokens.hs256(secret: Self.secret, claims: Self.claims()))
        let header = TestTokens.base64URL(TestTokens.json(["alg": "HS256", "typ": "JWT", "kid": "other"]))
        let error = await refusal(header + "." + parts[1] + "." + parts[2], by: authenticator)
        #expect(error?.code == "invalid_token")
        #expect(error?.message == "signature verification failed")
    }

    @Test func tamperedPayloadIsRefused() async throws {
        let authenticator = try await authenticator()
        let parts = parts(TestTokens.hs256(secret: Self.secret, claims: Self.claims()))
        let payload = TestTokens.base64URL(TestTokens.json(Self.claims(["sub": "admin"])))
        let error = await refusal(parts[0] + "." + payload + "." + parts[2], by: authenticator)
        #expect(error?.code == "invalid_token")
        #expect(error?.message == "signature verification failed")
    }

    @Test func badBase64URLIsRefused() async throws {
        let authenticator = try await authenticator()
        let parts = parts(TestTokens.hs256(secret: Self.secret, claims: Self.claims()))
        let standardAlphabet = parts[2].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        let variants = [
            parts[0] + "." + parts[1] + "=." + parts[2],              // padding
            parts[0] + "." + parts[1] + "." + parts[2] + "=",
            parts[0] + "." + parts[1] + "." + parts[2] + "*",         // outside the alphabet
            parts[0] + ".e." + parts[2],                              // impossible length (4n+1)
            parts[0] + "." + parts[1] + "." + parts[2] + "." + parts[2],  // four parts
            parts[0] + "." + parts[1],                                // two parts
            parts[0] + " ." + parts[1] + "." + parts[2],
            "",
        ]
        for token in variants {
            #expect(await refusal(token, by: authenticator)?.code == "invalid_token", "\(token)")
        }
        if standardAlphabet != parts[2] {
            #expect(await refusal(parts[0] + "." + parts[1] + "." + standardAlphabet, by: authenticator)?.message == "malformed base64url")
        }
    }

    @Test func tokenOver8KiBIsRefused() async throws {
        let authenticator = try await authenticator()
        func token(padding: Int) -> String {
            TestTokens.hs256(secret: Self.secret, claims: Self.claims(["pad": String(repeating: "x", count: padding)]))
        }
        // The largest padding that keeps the token within 8 KiB, then one byte more.
        var padding = 6000
        while token(padding: padding + 1).utf8.count <= 8192 { padding += 1 }
        #expect(token(padding: padding).utf8.count <= 8192)
        #expect(try await authenticator.verify(token(padding: padding)).subject == "alice")
        let large = token(padding: padding + 4)
        #expect(large.utf8.count > 8192)
        let error = await refusal(large, by: authenticator)
        #expect(error?.code == "invalid_token")
        #expect(error?.message == "token larger than 8 KiB")
        #expect(await refusal(String(repeating: "a", count: 1 << 20), by: authenticator)?.message == "token larger than 8 KiB")
    }

    @Test func nonObjectJSONIsRefused() async throws {
        let authenticator = try await authenticator()
        let goodHeader = #"{"alg":"HS256"}"#
        let goodPayload = String(decoding: TestTokens.json(Self.claims()), as: UTF8.self)
        func signed(_ header: String, _ payload: String) -> String {
            TestTokens.hs256(secret: Self.secret, rawHeader: header, rawPayload: payload)
        }
        #expect(try await authenticator.verify(signed(goodHeader, goodPayload)).subject == "alice")
        for payload in [#"["sub","alice"]"#, #""alice""#, "42", "null", "{not json", #"{"sub":"alice""#] {
            let error = await refusal(signed(goodHeader, payload), by: authenticator)
            #expect(error?.code == "invalid_token")
            #expect(error?.message == "the payload is not a JSON object", "\(payload)")
        }
        for header in [#"["HS256"]"#, #""HS256""#, "{"] {
            let error = await refusal(signed(header, goodPayload), by: authenticator)
            #expect(error?.message == "the header is not a JSON object", "\(header)")
        }
        #expect(await refusal(signed(#"{"typ":"JWT"}"#, goodPayload), by: authenticator)?.message == "the header has no alg")
        #expect(await refusal(signed(#"{"alg":"HS256","kid":7}"#, goodPayload), by: authenticator)?.code == "invalid_token")
        // Nesting: JSONSerialization's depth limit (512) refuses what is deeper, and what it
        // accepts comes back as JSON text; nothing recurses without bound.
        for (depth, accepted) in [(400, true), (2500, false)] {
            let nested = String(repeating: "[", count: depth) + String(repeating: "]", count: depth)
            let token = signed(goodHeader, #"{"sub":"alice","x":\#(nested)}"#)
            if accepted {
                #expect(try await authenticator.verify(token).claims["x"] == nested)
            } else {
                #expect(await refusal(token, by: authenticator)?.message == "the payload is not a JSON object")
            }
            let deepHeader = #"{"alg":"HS256","x":\#(nested)}"#
            if !accepted { #expect(await refusal(signed(deepHeader, goodPayload), by: authenticator)?.code == "invalid_token") }
        }
        let numericSubject = #"{"sub":42}"#
        #expect(await refusal(signed(goodHeader, numericSubject), by: authenticator)?.message == "the token has no subject (sub)")
    }
}

#endif
