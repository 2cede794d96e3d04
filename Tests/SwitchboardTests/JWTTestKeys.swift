#if JWTSupport
import Foundation
import SwitchboardTestSupport

/// Key pairs for the JWT tests, made once per test process by Python's `cryptography` (the
/// library under PyJWT) in a temporary folder: an HMAC secret file, RSA 2048, EC P-256/384/521
/// and Ed25519, private keys in PKCS#8 PEM (what PyJWT signs with), public keys in SPKI PEM
/// (what the server reads), plus a second RSA and a second P-256 key for "another key" cases.
struct JWTTestKeys: Sendable {
    let directory: String

    /// The secret in ``secretFile``, without the trailing newline the file has.
    static let secret = "jwt-test-secret-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

    private static let shared: Result<JWTTestKeys, any Error> = Result { try generate() }

    /// The process's keys (generated on first use).
    static func load() throws -> JWTTestKeys { try shared.get() }

    /// The HMAC secret file (``secret`` and a newline).
    var secretFile: String { directory + "/secret.txt" }

    /// The private key PyJWT signs `algorithm` with (the secret file for HS*).
    func privateKey(for algorithm: String, second: Bool = false) -> String {
        Self.family(algorithm).map { directory + "/\($0)\(second ? "-2" : "").key" } ?? secretFile
    }

    /// The public key the server verifies `algorithm` with (the secret file for HS*).
    func publicKey(for algorithm: String, second: Bool = false) -> String {
        Self.family(algorithm).map { directory + "/\($0)\(second ? "-2" : "").pub" } ?? secretFile
    }

    /// The file stem of an asymmetric algorithm's key, nil for HMAC.
    private static func family(_ algorithm: String) -> String? {
        switch algorithm {
        case "RS256", "RS384", "RS512", "PS256": "rsa"
        case "ES256": "ec256"
        case "ES384": "ec384"
        case "ES512": "ec521"
        case "EdDSA": "ed25519"
        default: nil
        }
    }

    /// The public JWK of a PEM public key, with `kid` (and `alg` when given), made by PyJWT.
    func jwk(publicKey path: String, kid: String, alg: String? = nil) throws -> String {
        let script = """
            import json, sys
            from jwt.algorithms import RSAAlgorithm, ECAlgorithm, OKPAlgorithm
            from cryptography.hazmat.primitives.serialization import load_pem_public_key
            from cryptography.hazmat.primitives.asymmetric import rsa, ec
            key = load_pem_public_key(open(sys.argv[1], 'rb').read())
            kind = RSAAlgorithm if isinstance(key, rsa.RSAPublicKey) else ECAlgorithm if isinstance(key, ec.EllipticCurvePublicKey) else OKPAlgorithm
            jwk = json.loads(kind.to_jwk(key))
            jwk['kid'] = sys.argv[2]
            if sys.argv[3]: jwk['alg'] = sys.argv[3]
            print(json.dumps(jwk))
            """
        return try TestTokens.python(script, arguments: [path, kid, alg ?? ""])
    }

    /// Writes `{"keys":[…]}` with these JWKs (JSON texts) to a new file and returns its path.
    func writeJWKS(_ keys: [String], name: String = UUID().uuidString) throws -> String {
        let path = directory + "/\(name).jwks.json"
        try Data("{\"keys\":[\(keys.joined(separator: ","))]}".utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    private static func generate() throws -> JWTTestKeys {
        let directory = try TestTemporaryDirectory.make(prefix: "jwt-keys").path
        let script = """
            import sys
            from cryptography.hazmat.primitives import serialization as s
            from cryptography.hazmat.primitives.asymmetric import rsa, ec, ed25519
            d = sys.argv[1]
            keys = {
                'rsa': lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
                'rsa-2': lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
                'ec256': lambda: ec.generate_private_key(ec.SECP256R1()),
                'ec256-2': lambda: ec.generate_private_key(ec.SECP256R1()),
                'ec384': lambda: ec.generate_private_key(ec.SECP384R1()),
                'ec521': lambda: ec.generate_private_key(ec.SECP521R1()),
                'ed25519': lambda: ed25519.Ed25519PrivateKey.generate(),
                'ed25519-2': lambda: ed25519.Ed25519PrivateKey.generate(),
            }
            for name, make in keys.items():
                key = make()
                open(f'{d}/{name}.key', 'wb').write(key.private_bytes(s.Encoding.PEM, s.PrivateFormat.PKCS8, s.NoEncryption()))
                open(f'{d}/{name}.pub', 'wb').write(key.public_key().public_bytes(s.Encoding.PEM, s.PublicFormat.SubjectPublicKeyInfo))
            open(f'{d}/secret.txt', 'w').write(sys.argv[2] + '\\n')
            """
        _ = try TestTokens.python(script, arguments: [directory, secret])
        return JWTTestKeys(directory: directory)
    }
}

#endif
