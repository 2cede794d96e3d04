import COpenSSL

/// A TLS failure, with OpenSSL's reason (e.g. `"certificate verify failed:
/// self-signed certificate"`, `"certificate verify failed: hostname mismatch"`).
public struct TLSError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Human-readable reason. For certificate verification failures this
    /// includes the X.509 verification result.
    public var message: String
    /// The raw OpenSSL error-queue entries (`ERR_error_string_n` format),
    /// oldest first. Empty for errors raised by Switchboard itself.
    public var openSSLErrors: [String]
    /// The X.509 verification result string when certificate verification
    /// failed (`X509_verify_cert_error_string(SSL_get_verify_result)`).
    public var verificationFailure: String?
    /// Set only when certificate pinning failed: the base64 SHA-256 hashes of the public keys
    /// the server presented, none of which matched a pin (``TLSConfiguration/PublicKeyPins``).
    public var unpinnedPublicKeys: [String]?

    /// Creates an error from a reason and, optionally, OpenSSL's error-queue entries and verification result.
    package init(message: String, openSSLErrors: [String] = [], verificationFailure: String? = nil,
                 unpinnedPublicKeys: [String]? = nil) {
        self.message = message
        self.openSSLErrors = openSSLErrors
        self.verificationFailure = verificationFailure
        self.unpinnedPublicKeys = unpinnedPublicKeys
    }

    /// `TLSError: <message>`.
    public var description: String { "TLSError: \(message)" }
}

/// Helpers around OpenSSL's thread-local error queue.
enum OpenSSLErrorQueue {
    /// Pops every entry off the calling thread's error queue.
    /// Returns the short reason strings and the full `ERR_error_string_n` lines.
    static func drain() -> (reasons: [String], details: [String]) {
        var reasons: [String] = []
        var details: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            // Cap to keep a misbehaving queue from growing the error unboundedly.
            if details.count >= 16 { continue }
            let detail = withUnsafeTemporaryAllocation(of: CChar.self, capacity: 256) { buffer -> String in
                guard let base = buffer.baseAddress else { return "error \(code)" }
                ERR_error_string_n(code, base, buffer.count)
                return String(cString: base)
            }
            details.append(detail)
            let reason = ERR_reason_error_string(code).map { String(cString: $0) } ?? detail
            if !reasons.contains(reason) { reasons.append(reason) }
        }
        return (reasons, details)
    }

    /// Builds a `TLSError` from the queue; `fallback` is used when the queue is empty.
    static func error(_ fallback: String) -> TLSError {
        let (reasons, details) = drain()
        let message = reasons.isEmpty ? fallback : "\(fallback): \(reasons.joined(separator: "; "))"
        return TLSError(message: message, openSSLErrors: details)
    }

    /// Library version string, e.g. "OpenSSL 3.0.19 27 Jan 2026".
    static var libraryVersion: String {
        guard let version = OpenSSL_version(OPENSSL_VERSION) else { return "unknown" }
        return String(cString: version)
    }
}
