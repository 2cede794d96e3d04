import ArgumentParser
import Switchboard

/// The client binaries' network flags: an HTTP `CONNECT` proxy, the CAs to trust, a client
/// certificate for mutual TLS, public key pins and the TLS versions.
package struct ClientNetworkOptions: ParsableArguments {
    @Option(help: "HTTP CONNECT proxy, http://[user:password@]host[:port] (ws and wss both tunnel through it).")
    package var proxy: String?
    @Flag(help: "Use the proxy named by https_proxy/http_proxy, except for hosts in no_proxy.")
    package var proxyFromEnvironment = false
    @Option(help: "CA file to trust for wss:// (default: the system trust store).")
    package var caFile: String?
    @Option(help: "Client certificate chain (PEM) for mutual TLS.")
    package var tlsCert: String?
    @Option(help: "Private key (PEM) of --tls-cert.")
    package var tlsKey: String?
    @Option(help: "File whose first line is the passphrase of an encrypted --tls-key.")
    package var tlsKeyPassphraseFile: String?
    @Option(help: "Pin the server's public key: base64 SHA-256 of its SubjectPublicKeyInfo (repeatable).")
    package var pinSha256: [String] = []
    @Flag(help: "With --pin-sha256: check the pins instead of the CA chain and host name (default: both).")
    package var pinInsteadOfCa = false
    @Option(help: "Highest TLS version to offer: 1.2 or 1.3 (default 1.3).")
    package var tlsMaxVersion: String?

    package init() {}

    package func validate() throws {
        if (tlsCert == nil) != (tlsKey == nil) { throw ValidationError("--tls-cert and --tls-key go together") }
        if tlsKeyPassphraseFile != nil && tlsKey == nil {
            throw ValidationError("--tls-key-passphrase-file needs --tls-key")
        }
        if pinInsteadOfCa && pinSha256.isEmpty { throw ValidationError("--pin-instead-of-ca needs --pin-sha256") }
        if proxy != nil && proxyFromEnvironment {
            throw ValidationError("--proxy and --proxy-from-environment exclude each other")
        }
        _ = try version(tlsMaxVersion)
    }

    /// The client TLS settings the flags describe.
    package func tlsConfiguration() throws -> TLSConfiguration {
        var tls = TLSConfiguration.default
        if let caFile { tls.trustRoots = .caFile(caFile) }
        if let tlsCert, let tlsKey {
            let passphrase = try tlsKeyPassphraseFile.map { path throws(SwitchboardError) in
                try TLSPassphrase(contentsOfFile: path)
            }
            tls.clientCertificate = .init(certificateChainFile: tlsCert, privateKeyFile: tlsKey,
                                          privateKeyPassphrase: passphrase)
        }
        if !pinSha256.isEmpty {
            tls.publicKeyPins = .init(sha256: pinSha256,
                                      mode: pinInsteadOfCa ? .insteadOfChainVerification : .inAdditionToChainVerification)
        }
        tls.maximumVersion = try version(tlsMaxVersion)
        return tls
    }

    /// The proxy the flags describe.
    package func proxyConfiguration() throws -> ProxyConfiguration {
        if proxyFromEnvironment { return .environment }
        guard let proxy else { return .none }
        return try ProxyConfiguration(url: proxy)
    }

    private func version(_ text: String?) throws -> TLSConfiguration.Version? {
        switch text {
        case nil: return nil
        case "1.2": return .tls12
        case "1.3": return .tls13
        case let other?: throw ValidationError("unknown TLS version \(other) (1.2 or 1.3)")
        }
    }
}
