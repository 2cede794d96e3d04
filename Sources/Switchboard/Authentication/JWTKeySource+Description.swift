#if JWTSupport

/// Descriptions name the file a key comes from and never show an in-memory secret (nor does
/// `dump`), so a key source can be logged.
extension JWTKeySource: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// `HMAC secret file PATH`, `public key file PATH`, `JWKS file PATH`, or
    /// `HMAC secret (<redacted>, N bytes)`.
    public var description: String {
        switch kind {
        case .secretFile(let path): "HMAC secret file \(path)"
        case .publicKeyFile(let path): "public key file \(path)"
        case .jwksFile(let path): "JWKS file \(path)"
        case .secret(let bytes): "HMAC secret (<redacted>, \(bytes.count) bytes)"
        }
    }

    /// The same as ``description``.
    public var debugDescription: String { description }

    /// A mirror with the description only, so that `dump` and reflection do not reach the bytes.
    public var customMirror: Mirror { Mirror(self, children: ["source": description], displayStyle: .struct) }
}

#endif
