#if JWTSupport
import Foundation
import JWTKit

/// The verification keys loaded from a ``JWTKeySource``, each bound to the algorithms its
/// family allows: one jwt-kit `JWTAlgorithm` (key and algorithm together) per pair, so that
/// jwt-kit never picks an algorithm itself.
///
/// jwt-kit's `JWTKeyCollection.verify` checks with the key it finds by `kid` (else its default
/// key) whatever the header's `alg` says, and a JWK without `alg` keeps the algorithm of the
/// first token it saw; choosing the (key, algorithm) pair here closes both. The signature
/// itself is always computed by jwt-kit (swift-crypto underneath).
struct JWTKeySet: Sendable {
    struct Key: Sendable {
        /// The JWK's `kid`; nil for a secret or PEM key, which accepts any `kid`.
        var id: String?
        /// `alg` → this key for this algorithm.
        var verifiers: [String: any JWTAlgorithm]
    }

    var keys: [Key]

    /// The keys that may verify a token with this `alg` and `kid`: a JWKS key only when the
    /// `kid` is its own (or the token has none), a secret or PEM key whatever the `kid`.
    func verifiers(algorithm: String, keyID: String?) -> [any JWTAlgorithm] {
        keys.compactMap { key in
            if let keyID, let id = key.id, id != keyID { return nil }
            return key.verifiers[algorithm]
        }
    }

    /// Why keys could not be loaded (file names and reasons, never key material).
    struct LoadError: Error, CustomStringConvertible {
        var description: String
    }

    static func load(_ source: JWTKeySource) async throws(LoadError) -> JWTKeySet {
        switch source.kind {
        case .secret(let bytes):
            return JWTKeySet(keys: [try await secretKey(bytes, id: nil, origin: "the in-memory secret")])
        case .secretFile(let path):
            var bytes = try read(path)
            if bytes.last == UInt8(ascii: "\n") { bytes.removeLast() }
            if bytes.last == UInt8(ascii: "\r") { bytes.removeLast() }
            return JWTKeySet(keys: [try await secretKey(bytes, id: nil, origin: path)])
        case .publicKeyFile(let path):
            return JWTKeySet(keys: [try await publicKey(pem: String(decoding: try read(path), as: UTF8.self), path: path)])
        case .jwksFile(let path):
            return try await jwks(try read(path), path: path)
        }
    }

    /// The one key of `collection`, as jwt-kit's algorithm object.
    private static func algorithm(_ collection: JWTKeyCollection) async throws(LoadError) -> any JWTAlgorithm {
        do {
            return try await collection.getKey()
        } catch {
            throw LoadError(description: "jwt-kit refused the key")
        }
    }

    private static func read(_ path: String) throws(LoadError) -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else { throw LoadError(description: "cannot read \(path)") }
        // Key files are small; a huge one is a mistake (a log, a core file), not a key.
        guard data.count <= 1 << 20 else { throw LoadError(description: "\(path) is larger than 1 MiB: not a key file") }
        return Array(data)
    }

    /// An HMAC secret, for the HS algorithms whose hash it is at least as long as (RFC 7518
    /// §3.2: 32 bytes for HS256, 48 for HS384, 64 for HS512; jwt-kit asserts it too).
    private static func secretKey(_ bytes: [UInt8], id: String?, origin: String) async throws(LoadError) -> Key {
        guard bytes.count >= 32 else {
            throw LoadError(description: "\(origin): the HMAC secret has \(bytes.count) bytes; HS256 needs at least 32 (RFC 7518 §3.2)")
        }
        var verifiers: [String: any JWTAlgorithm] = [:]
        for (name, digest, size) in [("HS256", DigestAlgorithm.sha256, 32), ("HS384", .sha384, 48), ("HS512", .sha512, 64)]
        where bytes.count >= size {
            verifiers[name] = try await algorithm(JWTKeyCollection().add(hmac: HMACKey(from: bytes), digestAlgorithm: digest))
        }
        return Key(id: id, verifiers: verifiers)
    }

    private static func publicKey(pem: String, path: String) async throws(LoadError) -> Key {
        if pem.contains("PRIVATE KEY") {
            throw LoadError(description: "\(path) holds a private key: give the server the public key only (openssl pkey -pubout)")
        }
        if let key = try? EdDSA.PublicKey(pem: pem) {
            return Key(id: nil, verifiers: ["EdDSA": try await algorithm(JWTKeyCollection().add(eddsa: key))])
        }
        if let key = try? ES256PublicKey(pem: pem) {
            return Key(id: nil, verifiers: ["ES256": try await algorithm(JWTKeyCollection().add(ecdsa: key))])
        }
        if let key = try? ES384PublicKey(pem: pem) {
            return Key(id: nil, verifiers: ["ES384": try await algorithm(JWTKeyCollection().add(ecdsa: key))])
        }
        if let key = try? ES512PublicKey(pem: pem) {
            return Key(id: nil, verifiers: ["ES512": try await algorithm(JWTKeyCollection().add(ecdsa: key))])
        }
        if let key = try? Insecure.RSA.PublicKey(pem: pem) {
            return Key(id: nil, verifiers: [
                "RS256": try await algorithm(JWTKeyCollection().add(rsa: key, digestAlgorithm: .sha256)),
                "RS384": try await algorithm(JWTKeyCollection().add(rsa: key, digestAlgorithm: .sha384)),
                "RS512": try await algorithm(JWTKeyCollection().add(rsa: key, digestAlgorithm: .sha512)),
                "PS256": try await algorithm(JWTKeyCollection().add(pss: key, digestAlgorithm: .sha256)),
            ])
        }
        throw LoadError(description: "\(path): not a PEM public key of a supported type (RSA of 2048 bits or more, EC P-256/384/521, Ed25519)")
    }

    /// A JWK Set: every key needs a `kid`; `oct` keys (`k`) are HMAC secrets; a key's `alg`,
    /// when present, is the only algorithm it verifies; keys with `"use":"enc"` are skipped.
    private static func jwks(_ bytes: [UInt8], path: String) async throws(LoadError) -> JWTKeySet {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any],
              let entries = object["keys"] as? [Any] else {
            throw LoadError(description: "\(path): not a JWK Set ({\"keys\":[…]})")
        }
        var keys: [Key] = []
        for (index, entry) in entries.enumerated() {
            guard let jwk = entry as? [String: Any] else { throw LoadError(description: "\(path): key \(index) is not an object") }
            if jwk["use"] as? String == "enc" { continue }
            guard let id = jwk["kid"] as? String, !id.isEmpty else {
                throw LoadError(description: "\(path): key \(index) has no kid")
            }
            let declared = jwk["alg"] as? String
            if jwk["alg"] != nil, declared == nil { throw LoadError(description: "\(path): key \(id): alg is not a string") }
            let algorithms: [String]
            switch (jwk["kty"] as? String, jwk["crv"] as? String) {
            case ("oct", _):
                guard let k = jwk["k"] as? String, let secret = JWTCompactToken.base64URLDecoded(ArraySlice(k.utf8)) else {
                    throw LoadError(description: "\(path): key \(id): an oct key needs k (base64url)")
                }
                var key = try await secretKey(secret, id: id, origin: "\(path): key \(id)")
                if let declared { key.verifiers = key.verifiers.filter { $0.key == declared } }
                guard !key.verifiers.isEmpty else { throw LoadError(description: "\(path): key \(id): alg does not fit an oct key") }
                keys.append(key)
                continue
            case ("RSA", _): algorithms = ["RS256", "RS384", "RS512", "PS256"]
            case ("EC", "P-256"): algorithms = ["ES256"]
            case ("EC", "P-384"): algorithms = ["ES384"]
            case ("EC", "P-521"): algorithms = ["ES512"]
            case ("OKP", "Ed25519"): algorithms = ["EdDSA"]
            default: throw LoadError(description: "\(path): key \(id): unsupported kty/crv")
            }
            let allowed = declared.map { algorithms.contains($0) ? [$0] : [] } ?? algorithms
            guard !allowed.isEmpty else { throw LoadError(description: "\(path): key \(id): alg does not fit its kty/crv") }
            var verifiers: [String: any JWTAlgorithm] = [:]
            for name in allowed {
                var bound = jwk
                bound["alg"] = name
                bound["d"] = nil  // verification needs the public part only
                bound["p"] = nil
                bound["q"] = nil
                guard let data = try? JSONSerialization.data(withJSONObject: bound),
                      let parsed = try? JSONDecoder().decode(JWK.self, from: data) else {
                    throw LoadError(description: "\(path): key \(id) is not a valid JWK")
                }
                do {
                    verifiers[name] = try await JWTKeyCollection().add(jwk: parsed).getKey(alg: name)
                } catch {
                    throw LoadError(description: "\(path): key \(id) is not usable for \(name)")
                }
            }
            keys.append(Key(id: id, verifiers: verifiers))
        }
        guard !keys.isEmpty else { throw LoadError(description: "\(path): no verification key") }
        return JWTKeySet(keys: keys)
    }
}

#endif
