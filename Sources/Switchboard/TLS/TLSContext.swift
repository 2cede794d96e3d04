import COpenSSL
import CSwitchboardShims
import SwitchboardCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// An `SSL_CTX` wrapper, created once per configuration and shared by many
/// sessions.
// Safety: the SSL_CTX is fully configured inside the factory methods before the
// instance is published and is never mutated afterwards; OpenSSL's SSL_CTX is
// internally locked for what sessions do with it concurrently (SSL_new, session
// cache, reference counting). The remaining stored properties are immutable lets.
final class TLSContext: @unchecked Sendable {
    /// The `SSL_CTX *`. Owned; freed in deinit.
    let pointer: OpaquePointer
    /// True for contexts made by `client(_:)`.
    let isClient: Bool
    /// Whether sessions must verify the peer's chain and name.
    let verifiesPeer: Bool
    /// From `TLSConfiguration.serverNameOverride`.
    let serverNameOverride: String?
    /// Client: the decoded SHA-256 pins and their mode (`TLSConfiguration.publicKeyPins`).
    let pins: (hashes: [[UInt8]], mode: TLSConfiguration.PublicKeyPins.Mode)?
    /// Server: whether client certificates are asked for (then verified against the CA file).
    let requestsClientCertificates: Bool

    private init(pointer: OpaquePointer, isClient: Bool, verifiesPeer: Bool, serverNameOverride: String?,
                 pins: (hashes: [[UInt8]], mode: TLSConfiguration.PublicKeyPins.Mode)? = nil,
                 requestsClientCertificates: Bool = false) {
        self.pointer = pointer
        self.isClient = isClient
        self.verifiesPeer = verifiesPeer
        self.serverNameOverride = serverNameOverride
        self.pins = pins
        self.requestsClientCertificates = requestsClientCertificates
    }

    deinit { SSL_CTX_free(pointer) }

    // MARK: - Client

    static func client(_ configuration: TLSConfiguration) throws(TLSError) -> TLSContext {
        ERR_clear_error()
        guard let method = TLS_client_method(), let ctx = SSL_CTX_new(method) else {
            throw OpenSSLErrorQueue.error("SSL_CTX_new failed")
        }
        var pins: (hashes: [[UInt8]], mode: TLSConfiguration.PublicKeyPins.Mode)?
        if let configured = configuration.publicKeyPins {
            var hashes: [[UInt8]] = []
            for pin in configured.sha256 {
                guard let hash = Base64.decode(pin), hash.count == 32 else {
                    SSL_CTX_free(ctx)
                    throw TLSError(message: "invalid public key pin \"\(pin)\": expected the base64 of a SHA-256 hash (32 bytes)")
                }
                hashes.append(hash)
            }
            guard !hashes.isEmpty else {
                SSL_CTX_free(ctx)
                throw TLSError(message: "public key pinning needs at least one pin")
            }
            pins = (hashes, configured.mode)
        }
        // Pins instead of chain verification: the chain and name are not checked, the pin is.
        let verifies = !configuration.dangerouslyDisableCertificateVerification
            && pins?.mode != .insteadOfChainVerification
        // From here on `context` owns ctx, so any throw frees it.
        let context = TLSContext(
            pointer: ctx, isClient: true, verifiesPeer: verifies,
            serverNameOverride: configuration.serverNameOverride, pins: pins)

        try applyCommonSettings(ctx, minimumVersion: configuration.minimumVersion,
                                maximumVersion: configuration.maximumVersion)

        if verifies {
            SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nil)
            try loadTrustRoots(ctx, configuration.trustRoots)
        } else {
            SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nil)
        }

        if let clientCertificate = configuration.clientCertificate {
            try loadCertificateAndKey(
                ctx, chainFile: clientCertificate.certificateChainFile,
                keyFile: clientCertificate.privateKeyFile, passphrase: clientCertificate.privateKeyPassphrase)
        }

        if !configuration.alpnProtocols.isEmpty {
            let wire = try alpnWireFormat(configuration.alpnProtocols)
            ERR_clear_error()
            // Note: returns 0 on success (unlike most OpenSSL calls).
            let rc = wire.withUnsafeBufferPointer { buffer in
                SSL_CTX_set_alpn_protos(ctx, buffer.baseAddress, UInt32(buffer.count))
            }
            guard rc == 0 else { throw OpenSSLErrorQueue.error("cannot set ALPN protocols") }
        }
        return context
    }

    // MARK: - Server

    static func server(_ configuration: TLSServerConfiguration) throws(TLSError) -> TLSContext {
        ERR_clear_error()
        guard let method = TLS_server_method(), let ctx = SSL_CTX_new(method) else {
            throw OpenSSLErrorQueue.error("SSL_CTX_new failed")
        }
        let requests = configuration.clientCertificates != .notRequested
        let context = TLSContext(pointer: ctx, isClient: false, verifiesPeer: requests, serverNameOverride: nil,
                                 requestsClientCertificates: requests)
        try applyCommonSettings(ctx, minimumVersion: configuration.minimumVersion,
                                maximumVersion: configuration.maximumVersion)
        switch configuration.clientCertificates {
        case .notRequested:
            SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nil)
        case .requested(let caFile), .required(let caFile):
            var mode = SSL_VERIFY_PEER
            if case .required = configuration.clientCertificates { mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT }
            SSL_CTX_set_verify(ctx, mode, nil)
            ERR_clear_error()
            guard SSL_CTX_load_verify_locations(ctx, caFile, nil) == 1 else {
                throw OpenSSLErrorQueue.error("cannot load the client CA file \(caFile)")
            }
            ERR_clear_error()
            // The CA names sent with the request, so clients pick the right certificate.
            guard switchboard_SSL_CTX_set_client_CA_file(ctx, caFile) == 1 else {
                throw OpenSSLErrorQueue.error("cannot read CA names from \(caFile)")
            }
            // TLS 1.3 session tickets would skip the certificate on resumption; the session
            // id context must be set for client verification with session caching.
            let idContext: [UInt8] = Array("switchboard".utf8)
            _ = SSL_CTX_set_session_id_context(ctx, idContext, UInt32(idContext.count))
        }
        try loadCertificateAndKey(
            ctx, chainFile: configuration.certificateChainFile, keyFile: configuration.privateKeyFile,
            passphrase: configuration.privateKeyPassphrase)
        SSL_CTX_set_alpn_select_cb(ctx, { _, out, outLength, clientList, clientListLength, _ in
            TLSContext.selectHTTP11(
                out: out, outLength: outLength, clientList: clientList, clientListLength: clientListLength)
        }, nil)
        return context
    }

    // MARK: - Helpers

    private static func applyCommonSettings(
        _ ctx: OpaquePointer, minimumVersion: TLSConfiguration.MinimumVersion,
        maximumVersion: TLSConfiguration.Version?
    ) throws(TLSError) {
        func number(_ version: TLSConfiguration.Version) -> Int32 {
            switch version {
            case .tls12: TLS1_2_VERSION
            case .tls13: TLS1_3_VERSION
            }
        }
        ERR_clear_error()
        guard switchboard_SSL_CTX_set_min_proto_version(ctx, number(minimumVersion)) == 1 else {
            throw OpenSSLErrorQueue.error("cannot set minimum TLS version")
        }
        if let maximumVersion {
            guard number(maximumVersion) >= number(minimumVersion) else {
                throw TLSError(message: "the maximum TLS version is below the minimum")
            }
            ERR_clear_error()
            guard switchboard_SSL_CTX_set_max_proto_version(ctx, number(maximumVersion)) == 1 else {
                throw OpenSSLErrorQueue.error("cannot set maximum TLS version")
            }
        }
        // RELEASE_BUFFERS: free the read/write buffers of idle connections.
        // ACCEPT_MOVING_WRITE_BUFFER: a retried SSL_write may come from a
        // different address (callers hand us whatever buffer they hold).
        // ENABLE_PARTIAL_WRITE is not needed: memory BIOs never refuse writes.
        _ = switchboard_SSL_CTX_set_mode(
            ctx,
            switchboard_SSL_MODE_RELEASE_BUFFERS() | switchboard_SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER())
        // No TLS 1.2 renegotiation (a DoS vector and never needed here); no compression (CRIME).
        _ = SSL_CTX_set_options(
            ctx, switchboard_SSL_OP_NO_RENEGOTIATION() | switchboard_SSL_OP_NO_COMPRESSION())
    }

    private static func loadTrustRoots(_ ctx: OpaquePointer, _ roots: TLSConfiguration.TrustRoots) throws(TLSError) {
        ERR_clear_error()
        switch roots {
        case .system:
            guard SSL_CTX_set_default_verify_paths(ctx) == 1 else {
                throw OpenSSLErrorQueue.error("cannot load the system trust store")
            }
            // set_default_verify_paths succeeds even when nothing is there;
            // fail early with a clear message instead of failing every handshake.
            let candidates = systemTrustStoreCandidates()
            guard candidates.contains(where: pathExists) else {
                throw TLSError(message: "no system trust store found (looked in \(candidates.joined(separator: ", "))); install ca-certificates, set SSL_CERT_FILE/SSL_CERT_DIR, or use trustRoots: .caFile")
            }
        case .caFile(let path):
            guard SSL_CTX_load_verify_locations(ctx, path, nil) == 1 else {
                throw OpenSSLErrorQueue.error("cannot load CA file \(path)")
            }
        case .caDirectory(let path):
            // Directory lookups are lazy; check it exists so a typo fails here.
            guard isDirectory(path) else {
                throw TLSError(message: "CA directory \(path) does not exist")
            }
            guard SSL_CTX_load_verify_locations(ctx, nil, path) == 1 else {
                throw OpenSSLErrorQueue.error("cannot use CA directory \(path)")
            }
        }
    }

    /// Where OpenSSL's default verify paths look (env overrides first).
    static func systemTrustStoreCandidates() -> [String] {
        var result: [String] = []
        if let fileEnv = X509_get_default_cert_file_env(), let value = getenv(fileEnv) {
            result.append(String(cString: value))
        }
        if let dirEnv = X509_get_default_cert_dir_env(), let value = getenv(dirEnv) {
            result.append(contentsOf: String(cString: value).split(separator: ":").map(String.init))
        }
        if let file = X509_get_default_cert_file() { result.append(String(cString: file)) }
        if let dir = X509_get_default_cert_dir() {
            result.append(contentsOf: String(cString: dir).split(separator: ":").map(String.init))
        }
        return result
    }

    private static func pathExists(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0
    }

    private static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    private static func loadCertificateAndKey(
        _ ctx: OpaquePointer, chainFile: String, keyFile: String, passphrase: TLSPassphrase?
    ) throws(TLSError) {
        ERR_clear_error()
        guard SSL_CTX_use_certificate_chain_file(ctx, chainFile) == 1 else {
            throw OpenSSLErrorQueue.error("cannot load certificate chain \(chainFile)")
        }
        ERR_clear_error()
        guard switchboard_SSL_CTX_use_PEM_private_key(ctx, keyFile, passphrase?.value) == 1 else {
            let hint = passphrase == nil
                ? " (if the key is encrypted, give its passphrase)" : " (wrong passphrase?)"
            let error = OpenSSLErrorQueue.error("cannot load private key \(keyFile)")
            throw TLSError(message: error.message + hint, openSSLErrors: error.openSSLErrors)
        }
        ERR_clear_error()
        guard SSL_CTX_check_private_key(ctx) == 1 else {
            throw OpenSSLErrorQueue.error("private key \(keyFile) does not match certificate \(chainFile)")
        }
    }

    /// ALPN protocol-name-list wire format: length-prefixed names.
    static func alpnWireFormat(_ protocols: [String]) throws(TLSError) -> [UInt8] {
        var wire: [UInt8] = []
        for name in protocols {
            let bytes = Array(name.utf8)
            guard (1...255).contains(bytes.count) else {
                throw TLSError(message: "invalid ALPN protocol name \"\(name)\": must be 1...255 bytes")
            }
            wire.append(UInt8(bytes.count))
            wire.append(contentsOf: bytes)
        }
        return wire
    }

    /// Server ALPN selection: "http/1.1" if the client offers it, otherwise
    /// proceed without ALPN. `clientList` is peer input: parsed with bounds checks.
    static func selectHTTP11(
        out: UnsafeMutablePointer<UnsafePointer<UInt8>?>?,
        outLength: UnsafeMutablePointer<UInt8>?,
        clientList: UnsafePointer<UInt8>?,
        clientListLength: UInt32
    ) -> Int32 {
        guard let out, let outLength, let clientList else { return SSL_TLSEXT_ERR_NOACK }
        let wanted: [UInt8] = Array("http/1.1".utf8)
        let list = UnsafeBufferPointer(start: clientList, count: Int(clientListLength))
        var index = 0
        while index < list.count {
            let length = Int(list[index])
            let start = index + 1
            let end = start + length
            guard length > 0, end <= list.count else { break }  // malformed: stop
            if length == wanted.count, list[start..<end].elementsEqual(wanted) {
                out.pointee = clientList + start  // points into the client's list, as OpenSSL expects
                outLength.pointee = UInt8(length)
                return SSL_TLSEXT_ERR_OK
            }
            index = end
        }
        return SSL_TLSEXT_ERR_NOACK
    }
}
