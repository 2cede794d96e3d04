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

enum TLSHandshakeState: Sendable, Equatable {
    /// The handshake finished. There may still be ciphertext to drain
    /// (e.g. the client's Finished message).
    case complete
    /// Drain and send pending ciphertext, then wait for more input.
    case needsIO
}

enum TLSReadResult: Sendable, Equatable {
    /// This many plaintext bytes were written into the buffer.
    case bytes(Int)
    /// No complete record is buffered: feed more ciphertext.
    case wantMoreInput
    /// The peer sent close_notify: no more plaintext will arrive.
    case closed
}

/// One TLS connection, sans-I/O: ciphertext goes in through
/// `receiveCiphertext` and comes out through `drainCiphertext`, using two
/// OpenSSL memory BIOs (no file descriptors).
///
/// Usage: after *every* call to `handshake`, `readPlaintext`,
/// `writePlaintext` or `shutdown` — including one that threw (OpenSSL queues
/// an alert for the peer) — drain pending ciphertext and send it.
///
/// Not Sendable: confined to one event-loop thread.
final class TLSSession {
    /// `SSL *`, owns both BIOs. Freed in deinit.
    private let ssl: OpaquePointer
    /// Incoming ciphertext (we write, OpenSSL reads). Owned by `ssl`.
    private let readBIO: OpaquePointer
    /// Outgoing ciphertext (OpenSSL writes, we read). Owned by `ssl`.
    private let writeBIO: OpaquePointer
    /// Keeps the SSL_CTX settings (and object) alive for the session's lifetime.
    private let context: TLSContext
    private let verifiesPeer: Bool
    /// Server with client certificates requested: the verified client certificate, read once
    /// when the handshake completes (nil when none was presented).
    private(set) var peerCertificate: TLSPeerCertificate?

    private var handshakeComplete = false
    private var receivedCloseNotify = false
    private var sentCloseNotify = false
    /// Set after a fatal error: OpenSSL forbids further use of the SSL object
    /// (including SSL_shutdown), so every later call rethrows this.
    private var failure: TLSError?

    // MARK: - Init

    /// Client session. `serverName` (or the configuration's
    /// `serverNameOverride`) is sent as SNI unless it is an IPv4/IPv6 literal,
    /// and is what the certificate must match (DNS name via SSL_set1_host, IP
    /// address via X509_VERIFY_PARAM_set1_ip_asc) unless verification was
    /// dangerously disabled.
    convenience init(clientWith context: TLSContext, serverName: String) throws(TLSError) {
        guard context.isClient else {
            throw TLSError(message: "a server TLSContext cannot create a client session")
        }
        let ssl = try Self.makeSSL(context)
        do throws(TLSError) {
            try Self.configureClient(
                ssl.ssl, serverName: context.serverNameOverride ?? serverName, verify: context.verifiesPeer)
        } catch {
            SSL_free(ssl.ssl)
            throw error
        }
        SSL_set_connect_state(ssl.ssl)
        self.init(ssl: ssl, context: context, verifiesPeer: context.verifiesPeer)
    }

    /// Server session.
    convenience init(serverWith context: TLSContext) throws(TLSError) {
        guard !context.isClient else {
            throw TLSError(message: "a client TLSContext cannot create a server session")
        }
        let ssl = try Self.makeSSL(context)
        SSL_set_accept_state(ssl.ssl)
        self.init(ssl: ssl, context: context, verifiesPeer: context.requestsClientCertificates)
    }

    private init(
        ssl: (ssl: OpaquePointer, read: OpaquePointer, write: OpaquePointer),
        context: TLSContext, verifiesPeer: Bool
    ) {
        self.ssl = ssl.ssl
        self.readBIO = ssl.read
        self.writeBIO = ssl.write
        self.context = context
        self.verifiesPeer = verifiesPeer
    }

    deinit { SSL_free(ssl) }

    private static func makeSSL(
        _ context: TLSContext
    ) throws(TLSError) -> (ssl: OpaquePointer, read: OpaquePointer, write: OpaquePointer) {
        ERR_clear_error()
        guard let ssl = SSL_new(context.pointer) else { throw OpenSSLErrorQueue.error("SSL_new failed") }
        guard let readBIO = BIO_new(BIO_s_mem()) else {
            SSL_free(ssl)
            throw OpenSSLErrorQueue.error("BIO_new failed")
        }
        guard let writeBIO = BIO_new(BIO_s_mem()) else {
            BIO_free(readBIO)
            SSL_free(ssl)
            throw OpenSSLErrorQueue.error("BIO_new failed")
        }
        // An empty memory BIO must mean "retry later", never EOF.
        _ = switchboard_BIO_set_mem_eof_return(readBIO, -1)
        _ = switchboard_BIO_set_mem_eof_return(writeBIO, -1)
        SSL_set_bio(ssl, readBIO, writeBIO)  // ssl now owns both BIOs
        return (ssl, readBIO, writeBIO)
    }

    private static func configureClient(_ ssl: OpaquePointer, serverName: String, verify: Bool) throws(TLSError) {
        guard !serverName.utf8.contains(0) else {
            throw TLSError(message: "invalid server name: contains a NUL byte")
        }
        let name = normalizedHost(serverName)
        ERR_clear_error()
        if let ip = ipLiteral(name) {
            // RFC 6066: no SNI for IP literals. Verify against the IP SAN.
            if verify {
                guard let param = SSL_get0_param(ssl), X509_VERIFY_PARAM_set1_ip_asc(param, ip) == 1 else {
                    throw OpenSSLErrorQueue.error("cannot set IP address \(ip) for verification")
                }
            }
            return
        }
        if verify && name.isEmpty {
            throw TLSError(message: "a server name is required to verify the server's certificate")
        }
        if !name.isEmpty {
            guard switchboard_SSL_set_tlsext_host_name(ssl, name) == 1 else {
                throw OpenSSLErrorQueue.error("cannot set SNI server name \(name)")
            }
        }
        if verify {
            SSL_set_hostflags(ssl, UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS))
            guard SSL_set1_host(ssl, name) == 1 else {
                throw OpenSSLErrorQueue.error("cannot set host name \(name) for verification")
            }
        }
    }

    /// Strips URL brackets ("[::1]") and one trailing dot ("example.com.").
    static func normalizedHost(_ host: String) -> String {
        let name = SocketAddress.hostWithoutBrackets(host)
        return name.hasSuffix(".") && name.count > 1 ? String(name.dropLast()) : name
    }

    /// The address text if `host` is an IPv4 or IPv6 literal (an IPv6 zone
    /// suffix such as "%eth0" is dropped), otherwise nil.
    static func ipLiteral(_ host: String) -> String? {
        var address = in6_addr()
        if inet_pton(AF_INET, host, &address) == 1 { return host }
        let withoutZone = host.split(separator: "%", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? host
        if inet_pton(AF_INET6, withoutZone, &address) == 1 { return withoutZone }
        return nil
    }

    // MARK: - Ciphertext in/out

    /// Ciphertext that arrived from the socket.
    func receiveCiphertext(_ bytes: UnsafeRawBufferPointer) {
        guard failure == nil, var next = bytes.baseAddress else { return }
        var remaining = bytes.count
        while remaining > 0 {
            var written = 0
            ERR_clear_error()
            guard BIO_write_ex(readBIO, next, remaining, &written) == 1, written > 0 else {
                failure = OpenSSLErrorQueue.error("cannot buffer incoming ciphertext")
                return
            }
            remaining -= written
            next += written
        }
    }

    /// Moves pending outgoing ciphertext out of the write BIO, appending it to `buffer`.
    func drainCiphertext(into buffer: inout [UInt8]) {
        while true {
            let pending = BIO_ctrl_pending(writeBIO)
            guard pending > 0 else { return }
            let start = buffer.count
            buffer.append(contentsOf: repeatElement(0, count: pending))
            var read = 0
            let ok = buffer.withUnsafeMutableBytes { raw -> Bool in
                guard let base = raw.baseAddress else { return false }
                return BIO_read_ex(writeBIO, base + start, pending, &read) == 1
            }
            if !ok { read = 0 }
            if read < pending { buffer.removeLast(pending - read) }
            if read == 0 { return }
        }
    }

    var hasPendingCiphertext: Bool { BIO_ctrl_pending(writeBIO) > 0 }

    /// Whether received input waits to be decrypted by ``readPlaintext(into:)``: ciphertext not
    /// yet processed, or plaintext of a record already decrypted.
    var hasBufferedInput: Bool { BIO_ctrl_pending(readBIO) > 0 || SSL_pending(ssl) > 0 }

    // MARK: - Handshake

    /// Drives the handshake. Drain ciphertext afterwards whatever the outcome.
    func handshake() throws(TLSError) -> TLSHandshakeState {
        if let failure { throw failure }
        if handshakeComplete { return .complete }
        ERR_clear_error()
        let rc = SSL_do_handshake(ssl)
        if rc == 1 {
            if context.isClient {
                // Defence in depth: SSL_VERIFY_PEER already aborts on failure.
                if verifiesPeer {
                    guard SSL_get0_peer_certificate(ssl) != nil, SSL_get_verify_result(ssl) == X509_V_OK else {
                        throw fail(verificationError(prefix: "certificate verify failed"))
                    }
                }
                if let pins = context.pins { try checkPins(pins) }
            } else if verifiesPeer, let certificate = SSL_get0_peer_certificate(ssl) {
                // Requested or required client certificate: OpenSSL aborted on a bad one; check again.
                guard SSL_get_verify_result(ssl) == X509_V_OK else {
                    throw fail(verificationError(prefix: "client certificate verify failed"))
                }
                peerCertificate = Self.describe(certificate)
            }
            handshakeComplete = true
            return .complete
        }
        switch SSL_get_error(ssl, rc) {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
            return .needsIO
        case let code:
            throw fail(operationError("TLS handshake failed", code: code))
        }
    }

    // MARK: - Peer certificates

    /// Fails unless a public key of the peer's chain matches a pin: the verified chain when the
    /// chain was verified, the leaf alone when the pins replace verification.
    private func checkPins(_ pins: (hashes: [[UInt8]], mode: TLSConfiguration.PublicKeyPins.Mode)) throws(TLSError) {
        var certificates: [OpaquePointer] = []
        switch pins.mode {
        case .inAdditionToChainVerification:
            let chain = SSL_get0_verified_chain(ssl)
            for index in 0..<switchboard_cert_chain_count(chain) {
                if let certificate = switchboard_cert_chain_at(chain, index) { certificates.append(certificate) }
            }
        case .insteadOfChainVerification:
            if let leaf = SSL_get0_peer_certificate(ssl) { certificates.append(leaf) }
        }
        var presented: [String] = []
        for certificate in certificates {
            var hash = [UInt8](repeating: 0, count: 32)
            guard switchboard_X509_spki_sha256(certificate, &hash) == 1 else { continue }
            if pins.hashes.contains(hash) { return }
            presented.append(Base64.encode(hash))
        }
        let scope = pins.mode == .insteadOfChainVerification ? "the server's certificate" : "the server's verified chain"
        throw fail(TLSError(
            message: "certificate pinning failed: no public key of \(scope) matches a pin (presented sha256: \(presented.joined(separator: ", ")))",
            unpinnedPublicKeys: presented))
    }

    /// The subject (RFC 4514) and alternative names of a certificate.
    static func describe(_ certificate: OpaquePointer) -> TLSPeerCertificate {
        // Never truncated (a cut subject could pass a prefix check): sized by a first call.
        var subject = ""
        var capacity = 1024
        for _ in 0..<2 {
            let length = withUnsafeTemporaryAllocation(of: CChar.self, capacity: capacity) { buffer -> Int in
                guard let base = buffer.baseAddress else { return -1 }
                let length = Int(switchboard_X509_subject_rfc4514(certificate, base, buffer.count))
                if length >= 0 && length < buffer.count { subject = String(cString: base) }
                return length
            }
            guard length >= capacity else { break }
            capacity = length + 1
        }
        var names: [TLSPeerCertificate.AlternativeName] = []
        withUnsafeTemporaryAllocation(of: CChar.self, capacity: 8192) { buffer in
            guard let base = buffer.baseAddress else { return }
            let used = Int(switchboard_X509_subject_alt_names(certificate, base, buffer.count))
            guard used > 0, used <= buffer.count else { return }
            let bytes = UnsafeRawBufferPointer(start: base, count: used)
            for entry in bytes.split(separator: 0) {
                if let name = TLSPeerCertificate.AlternativeName(String(decoding: entry, as: UTF8.self)) {
                    names.append(name)
                }
            }
        }
        return TLSPeerCertificate(subject: subject, alternativeNames: names)
    }

    // MARK: - Application data

    /// Decrypts into `buffer`. Returns `.wantMoreInput` until `handshake()` has
    /// returned `.complete`. Drain ciphertext afterwards: TLS 1.3 post-handshake
    /// messages (KeyUpdate) can make reads produce output.
    func readPlaintext(into buffer: UnsafeMutableRawBufferPointer) throws(TLSError) -> TLSReadResult {
        if let failure { throw failure }
        if receivedCloseNotify { return .closed }
        // Never let SSL_read drive the handshake implicitly: handshake() does
        // the post-handshake verification checks.
        guard handshakeComplete else { return .wantMoreInput }
        guard let base = buffer.baseAddress, buffer.count > 0 else { return .bytes(0) }
        var read = 0
        ERR_clear_error()
        let rc = SSL_read_ex(ssl, base, buffer.count, &read)
        if rc == 1 { return .bytes(read) }
        switch SSL_get_error(ssl, rc) {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
            return .wantMoreInput
        case SSL_ERROR_ZERO_RETURN:
            receivedCloseNotify = true
            return .closed
        case let code:
            throw fail(operationError("TLS read failed", code: code))
        }
    }

    /// Encrypts `bytes`; returns how many were consumed (normally all; 0 if the
    /// handshake has not finished yet — retry with the same bytes later).
    func writePlaintext(_ bytes: UnsafeRawBufferPointer) throws(TLSError) -> Int {
        if let failure { throw failure }
        guard handshakeComplete, let base = bytes.baseAddress, bytes.count > 0 else { return 0 }
        var consumed = 0
        while consumed < bytes.count {
            var written = 0
            ERR_clear_error()
            let rc = SSL_write_ex(ssl, base + consumed, bytes.count - consumed, &written)
            if rc == 1 {
                consumed += written
                continue
            }
            switch SSL_get_error(ssl, rc) {
            case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
                return consumed
            case let code:
                throw fail(operationError("TLS write failed", code: code))
            }
        }
        return consumed
    }

    /// Queues close_notify (once). Drain ciphertext afterwards. A no-op after a
    /// fatal error or before the handshake finished.
    func shutdown() {
        guard failure == nil, !sentCloseNotify else { return }
        sentCloseNotify = true
        guard SSL_is_init_finished(ssl) == 1 else { return }
        ERR_clear_error()
        _ = SSL_shutdown(ssl)  // 0 = sent, awaiting the peer's; 1 = both done
        ERR_clear_error()
    }

    // MARK: - Introspection

    var negotiatedALPN: String? {
        var data: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &data, &length)
        guard let data, length > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: data, count: Int(length)), as: UTF8.self)
    }

    /// True only when the handshake completed and the peer's chain (and, on a client, name)
    /// were verified (always false when verification is disabled or replaced by pins, and on a
    /// server that does not request client certificates or got none).
    var peerVerified: Bool {
        verifiesPeer && handshakeComplete && failure == nil
            && SSL_get0_peer_certificate(ssl) != nil && SSL_get_verify_result(ssl) == X509_V_OK
    }

    /// The SNI name: on a server, what the client asked for (nil if none was
    /// sent); on a client, what it sent.
    var requestedServerName: String? {
        guard let name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name) else { return nil }
        return String(cString: name)
    }

    /// e.g. "TLSv1.3" once the handshake completed.
    var negotiatedProtocolVersion: String? {
        guard handshakeComplete, let version = SSL_get_version(ssl) else { return nil }
        return String(cString: version)
    }

    // MARK: - Errors

    private func fail(_ error: TLSError) -> TLSError {
        failure = error
        return error
    }

    /// Error for a failed SSL_* call: the error queue's reasons, plus the
    /// X.509 verification result when certificate verification failed.
    private func operationError(_ operation: String, code: Int32) -> TLSError {
        let (reasons, details) = OpenSSLErrorQueue.drain()
        var message: String
        if !reasons.isEmpty {
            message = reasons.joined(separator: "; ")
        } else {
            switch code {
            case SSL_ERROR_ZERO_RETURN: message = "\(operation): peer closed the connection"
            case SSL_ERROR_SYSCALL: message = "\(operation): unexpected end of stream"
            default: message = "\(operation) (SSL_get_error \(code))"
            }
        }
        var verification: String?
        if verifiesPeer {
            let result = SSL_get_verify_result(ssl)
            if result != X509_V_OK {
                let text = X509_verify_cert_error_string(result).map { String(cString: $0) } ?? "error \(result)"
                verification = text
                message += ": \(text)"
            }
        }
        return TLSError(message: message, openSSLErrors: details, verificationFailure: verification)
    }

    private func verificationError(prefix: String) -> TLSError {
        _ = OpenSSLErrorQueue.drain()
        let result = SSL_get_verify_result(ssl)
        let text: String
        if SSL_get0_peer_certificate(ssl) == nil {
            text = "no peer certificate"
        } else {
            text = X509_verify_cert_error_string(result).map { String(cString: $0) } ?? "error \(result)"
        }
        return TLSError(message: "\(prefix): \(text)", verificationFailure: text)
    }
}

@available(*, unavailable)
extension TLSSession: Sendable {}
