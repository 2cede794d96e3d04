#if JWTSupport

/// Where a ``JWTAuthenticator`` takes its verification keys from.
///
/// File sources are read when the authenticator is created and again by
/// ``JWTAuthenticator/reload()`` (the example servers call it on `SIGHUP`), so a key can be
/// rotated without a restart. The key family decides which `alg` values a token may carry: a
/// token whose algorithm does not belong to the key's family is refused before any signature
/// check (the classic "HS256 signed with the RSA public key" forgery).
public struct JWTKeySource: Sendable {
    enum Kind: Sendable {
        case secretFile(String)
        case publicKeyFile(String)
        case jwksFile(String)
        case secret([UInt8])
    }

    let kind: Kind

    /// An HMAC secret in a file: its raw bytes, with one trailing newline (`\n` or `\r\n`)
    /// stripped so that `echo secret > file` works. Tokens may use HS256, HS384 or HS512.
    ///
    /// RFC 7518 §3.2 requires a secret at least as long as the hash: a secret of fewer than 32
    /// bytes is refused, one of 32 to 47 bytes verifies HS256 only, 48 to 63 HS256 and HS384,
    /// 64 or more all three. Make one with `openssl rand -base64 48 > secret`.
    public static func secretFile(_ path: String) -> JWTKeySource { .init(kind: .secretFile(path)) }

    /// A PEM public key in a file: RSA (`RS256`, `RS384`, `RS512`, `PS256`), EC P-256 (`ES256`),
    /// P-384 (`ES384`), P-521 (`ES512`) or Ed25519 (`EdDSA`); the key type is detected.
    ///
    /// Only public keys (`-----BEGIN PUBLIC KEY-----`, and `BEGIN RSA PUBLIC KEY` for RSA) are
    /// accepted: a server that verifies tokens has no reason to hold the signing key.
    public static func publicKeyFile(_ path: String) -> JWTKeySource { .init(kind: .publicKeyFile(path)) }

    /// A JWK Set (RFC 7517 §5, `{"keys":[…]}`) in a file: several keys told apart by `kid`, for
    /// rotation (publish the new key, then sign with it, then drop the old one).
    ///
    /// A token with a `kid` is checked with that key only; a token without one is checked with
    /// each key whose family matches its `alg`.
    public static func jwksFile(_ path: String) -> JWTKeySource { .init(kind: .jwksFile(path)) }

    /// An HMAC secret held in memory (tests, or a secret from a vault); `reload()` keeps it.
    /// The same length rules as ``secretFile(_:)`` apply.
    public static func secret(_ bytes: [UInt8]) -> JWTKeySource { .init(kind: .secret(bytes)) }
}

#endif
