/// Client-side TLS settings.
///
/// Secure by default: the server's certificate chain is verified against the
/// system trust store **and** the certificate must match the host name (or IP
/// address) being connected to. SNI is sent for DNS names (never for IP
/// literals), TLS 1.2 is the minimum protocol version and ALPN offers
/// `http/1.1`.
///
/// The only way to accept an unverified peer is the loudly named
/// ``dangerouslyDisableCertificateVerification`` flag; no missing or empty
/// setting ever means "accept anything".
public struct TLSConfiguration: Sendable, Equatable {
    /// Which certificate authorities are trusted to identify the server.
    public enum TrustRoots: Sendable, Equatable {
        /// The operating system's trust store (OpenSSL's default verify paths,
        /// e.g. `/etc/ssl/certs` on Debian/Ubuntu; honours `SSL_CERT_FILE` /
        /// `SSL_CERT_DIR`).
        case system
        /// A PEM file of CA certificates. **Replaces** the system store: only
        /// these CAs are trusted.
        case caFile(String)
        /// A directory of CA certificates in OpenSSL hashed-name layout
        /// (`openssl rehash`). **Replaces** the system store: only these CAs
        /// are trusted.
        case caDirectory(String)
    }

    /// The lowest TLS protocol version that will be negotiated.
    public enum MinimumVersion: Sendable, Equatable {
        /// TLS 1.2 or later (the default).
        case tls12
        /// TLS 1.3 only.
        case tls13
    }

    /// A client certificate (for mutual TLS), both files in PEM format.
    public struct ClientCertificate: Sendable, Equatable {
        /// Leaf certificate followed by any intermediates.
        public var certificateChainFile: String
        /// Private key matching the leaf certificate (unencrypted PEM).
        public var privateKeyFile: String

        /// Creates a client certificate from the paths of its PEM files (read when the TLS context is made).
        public init(certificateChainFile: String, privateKeyFile: String) {
            self.certificateChainFile = certificateChainFile
            self.privateKeyFile = privateKeyFile
        }
    }

    /// Which CAs are trusted to identify the server (default ``TrustRoots/system``).
    public var trustRoots: TrustRoots
    /// The lowest protocol version offered (default ``MinimumVersion/tls12``).
    public var minimumVersion: MinimumVersion
    /// A certificate to present when the server asks for one (mutual TLS); nil: none.
    public var clientCertificate: ClientCertificate?
    /// ALPN protocols offered, in preference order. Each must be 1...255 bytes.
    /// An empty list disables ALPN.
    public var alpnProtocols: [String]
    /// Overrides the name used for SNI and hostname verification
    /// (default: the endpoint host).
    public var serverNameOverride: String?
    /// Loudly named escape hatch: disables certificate chain **and** hostname
    /// verification, so any peer (including an active attacker) is accepted.
    /// There is no other path to "accept anything". Intended for tests only.
    public var dangerouslyDisableCertificateVerification: Bool

    /// Creates client settings; every default is the secure one (see the properties).
    public init(
        trustRoots: TrustRoots = .system,
        minimumVersion: MinimumVersion = .tls12,
        clientCertificate: ClientCertificate? = nil,
        alpnProtocols: [String] = ["http/1.1"],
        serverNameOverride: String? = nil,
        dangerouslyDisableCertificateVerification: Bool = false
    ) {
        self.trustRoots = trustRoots
        self.minimumVersion = minimumVersion
        self.clientCertificate = clientCertificate
        self.alpnProtocols = alpnProtocols
        self.serverNameOverride = serverNameOverride
        self.dangerouslyDisableCertificateVerification = dangerouslyDisableCertificateVerification
    }

    /// Verify against the system trust store, TLS 1.2+, ALPN `http/1.1`.
    public static let `default` = TLSConfiguration()
}

/// Server-side TLS settings: a PEM certificate chain and private key, TLS 1.2
/// minimum. ALPN `http/1.1` is selected when the client offers it (otherwise
/// the handshake proceeds without ALPN). Client certificates are not requested.
public struct TLSServerConfiguration: Sendable, Equatable {
    /// Leaf certificate followed by any intermediates (PEM).
    public var certificateChainFile: String
    /// Private key matching the leaf certificate (unencrypted PEM).
    public var privateKeyFile: String
    /// The lowest protocol version accepted (default ``TLSConfiguration/MinimumVersion/tls12``).
    public var minimumVersion: TLSConfiguration.MinimumVersion

    /// Creates server settings from the paths of a PEM certificate chain and its private key
    /// (read when the server starts: a bad file makes ``WebSocketServer/start()`` throw).
    public init(
        certificateChainFile: String,
        privateKeyFile: String,
        minimumVersion: TLSConfiguration.MinimumVersion = .tls12
    ) {
        self.certificateChainFile = certificateChainFile
        self.privateKeyFile = privateKeyFile
        self.minimumVersion = minimumVersion
    }
}
