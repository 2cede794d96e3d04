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

    /// A TLS protocol version: the lowest (``minimumVersion``) or highest (``maximumVersion``)
    /// that will be negotiated.
    public enum MinimumVersion: Sendable, Equatable {
        /// TLS 1.2 (the default minimum).
        case tls12
        /// TLS 1.3.
        case tls13
    }
    /// A TLS protocol version (the same type as ``MinimumVersion``).
    public typealias Version = MinimumVersion

    /// A client certificate (for mutual TLS), both files in PEM format.
    public struct ClientCertificate: Sendable, Equatable {
        /// Leaf certificate followed by any intermediates.
        public var certificateChainFile: String
        /// Private key matching the leaf certificate (PEM; encrypted keys need
        /// ``privateKeyPassphrase``).
        public var privateKeyFile: String
        /// The passphrase of an encrypted private key; nil for an unencrypted one. Never
        /// printed (see ``TLSPassphrase``).
        public var privateKeyPassphrase: TLSPassphrase?

        /// Creates a client certificate from the paths of its PEM files (read when the TLS
        /// context is made, that is on the first connection with these settings).
        public init(certificateChainFile: String, privateKeyFile: String, privateKeyPassphrase: TLSPassphrase? = nil) {
            self.certificateChainFile = certificateChainFile
            self.privateKeyFile = privateKeyFile
            self.privateKeyPassphrase = privateKeyPassphrase
        }
    }

    /// Certificate pinning: the server must present a certificate whose public key
    /// (SubjectPublicKeyInfo) has one of the given SHA-256 hashes.
    ///
    /// A pin is the base64 of the SHA-256 of the DER SubjectPublicKeyInfo (the `pin-sha256` of
    /// RFC 7469), e.g. from
    /// `openssl x509 -in cert.pem -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64`.
    /// A mismatch fails the connection with ``SwitchboardError/Kind/certificatePinning``.
    public struct PublicKeyPins: Sendable, Equatable {
        /// What the pins do to the usual verification.
        public enum Mode: Sendable, Equatable {
            /// The chain and host name are verified as usual **and** a key of the verified chain
            /// (leaf, intermediate or root) must match a pin. The safe choice: pin a CA's or
            /// an intermediate's key and keep rotating leaves.
            case inAdditionToChainVerification
            /// No chain or host-name verification: the leaf certificate's key must match a pin,
            /// and nothing else is checked. For self-signed servers whose key you know.
            case insteadOfChainVerification
        }

        /// Base64 SHA-256 hashes of the accepted SubjectPublicKeyInfos.
        public var sha256: [String]
        /// Whether chain verification still happens (see ``Mode``).
        public var mode: Mode

        /// Pins `sha256` (base64, 32 bytes once decoded; checked when connecting).
        public init(sha256: [String], mode: Mode = .inAdditionToChainVerification) {
            self.sha256 = sha256
            self.mode = mode
        }
    }

    /// Which CAs are trusted to identify the server (default ``TrustRoots/system``).
    public var trustRoots: TrustRoots
    /// The lowest protocol version offered (default ``MinimumVersion/tls12``).
    public var minimumVersion: MinimumVersion
    /// The highest protocol version offered (default nil: the highest OpenSSL supports, TLS 1.3).
    public var maximumVersion: Version?
    /// Certificate pinning (default nil: none). See ``PublicKeyPins``.
    public var publicKeyPins: PublicKeyPins?
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
        dangerouslyDisableCertificateVerification: Bool = false,
        maximumVersion: Version? = nil,
        publicKeyPins: PublicKeyPins? = nil
    ) {
        self.trustRoots = trustRoots
        self.minimumVersion = minimumVersion
        self.maximumVersion = maximumVersion
        self.publicKeyPins = publicKeyPins
        self.clientCertificate = clientCertificate
        self.alpnProtocols = alpnProtocols
        self.serverNameOverride = serverNameOverride
        self.dangerouslyDisableCertificateVerification = dangerouslyDisableCertificateVerification
    }

    /// Verify against the system trust store, TLS 1.2+, ALPN `http/1.1`.
    public static let `default` = TLSConfiguration()
}

/// Server-side TLS settings: a PEM certificate chain and private key, TLS 1.2 minimum. ALPN
/// `http/1.1` is selected when the client offers it (otherwise the handshake proceeds without
/// ALPN). Client certificates are not requested unless ``clientCertificates`` says so.
public struct TLSServerConfiguration: Sendable, Equatable {
    /// Whether the server asks clients for a certificate (mutual TLS).
    public enum ClientCertificates: Sendable, Equatable {
        /// No client certificate is asked for (the default).
        case notRequested
        /// A certificate is asked for; a client without one is still accepted (its request's
        /// `WebSocketUpgradeRequest.clientCertificate` is nil), one that presents a
        /// certificate not issued by a CA of the file fails the TLS handshake.
        case requested(trustedCAFile: String)
        /// A certificate issued by a CA of the PEM file is required: without one, or with
        /// another, the TLS handshake fails before any HTTP is read.
        case required(trustedCAFile: String)
    }

    /// Leaf certificate followed by any intermediates (PEM).
    public var certificateChainFile: String
    /// Private key matching the leaf certificate (PEM; encrypted keys need
    /// ``privateKeyPassphrase``).
    public var privateKeyFile: String
    /// The passphrase of an encrypted private key; nil for an unencrypted one. Never printed.
    public var privateKeyPassphrase: TLSPassphrase?
    /// The lowest protocol version accepted (default ``TLSConfiguration/MinimumVersion/tls12``).
    public var minimumVersion: TLSConfiguration.MinimumVersion
    /// The highest protocol version accepted (default nil: TLS 1.3).
    public var maximumVersion: TLSConfiguration.Version?
    /// Mutual TLS (default ``ClientCertificates/notRequested``). The verified certificate's
    /// subject and alternative names reach `authenticate` as
    /// `WebSocketUpgradeRequest.clientCertificate`.
    public var clientCertificates: ClientCertificates

    /// Creates server settings from the paths of a PEM certificate chain and its private key
    /// (read when the server starts: a bad file makes ``WebSocketServer/start()`` throw).
    public init(
        certificateChainFile: String,
        privateKeyFile: String,
        minimumVersion: TLSConfiguration.MinimumVersion = .tls12,
        maximumVersion: TLSConfiguration.Version? = nil,
        privateKeyPassphrase: TLSPassphrase? = nil,
        clientCertificates: ClientCertificates = .notRequested
    ) {
        self.certificateChainFile = certificateChainFile
        self.privateKeyFile = privateKeyFile
        self.minimumVersion = minimumVersion
        self.maximumVersion = maximumVersion
        self.privateKeyPassphrase = privateKeyPassphrase
        self.clientCertificates = clientCertificates
    }
}
