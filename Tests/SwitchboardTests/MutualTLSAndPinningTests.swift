import Foundation
import Synchronization
import Testing
import SwitchboardCore
@testable import Switchboard

/// Mutual TLS, certificate pinning and TLS versions, our client against our server (the same
/// features against Python's `ssl` are in ``ClientNetworkInteropTests``). The certificates
/// come from the `openssl` CLI (``TestPKI``), and so do the expected pins.
@Suite("Mutual TLS, pinning and TLS versions")
struct MutualTLSAndPinningTests {
    /// A TLS echo server whose `authenticate` records the client certificate it was given.
    final class Server: Sendable {
        let server: WebSocketServer
        let port: Int
        let seen = SeenCertificates()

        init(_ tls: TLSServerConfiguration) async throws {
            var config = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
            config.loopCount = 1
            config.tls = tls
            // A minute, not 10 s: it only ends a failing wait (a TLS handshake under
            // ThreadSanitizer with the whole suite running took longer than 10 s).
            config.connection.handshakeTimeout = .seconds(60)
            server = WebSocketServer(configuration: config)
            let seen = self.seen
            server.route("/", authenticate: { request in
                seen.list.withLock { $0.append(request.clientCertificate) }
                return .accept(userInfo: ["subject": request.clientCertificate?.subject ?? ""])
            }) { connection in
                for await message in connection.messages() { try? await connection.send(message) }
            }
            port = try await server.start()
        }

        func stop() async { await server.shutdown() }
    }

    /// What `authenticate` was given, in order.
    final class SeenCertificates: Sendable {
        let list = Mutex<[TLSPeerCertificate?]>([])
    }

    static func serverTLS(_ pki: TestPKI, clientCertificates: TLSServerConfiguration.ClientCertificates = .notRequested,
                          maximumVersion: TLSConfiguration.Version? = nil) -> TLSServerConfiguration {
        TLSServerConfiguration(certificateChainFile: pki.serverCertificate, privateKeyFile: pki.serverKey,
                               maximumVersion: maximumVersion, clientCertificates: clientCertificates)
    }

    /// Connects, echoes one message, and returns the connection's TLS version.
    static func roundTrip(port: Int, tls: TLSConfiguration, host: String = "localhost") async throws(SwitchboardError)
        -> String? {
        let adapter = SocketAdapter()
        var configuration = WebSocketConfiguration.default
        configuration.handshakeTimeout = .seconds(60)   // as the server's: it only ends a failing wait
        let endpoint = try WebSocketURLEndpoint(url: "wss://\(host):\(port)/", tls: tls, connectTimeout: .seconds(60),
                                                configuration: configuration)
        let messages = try await adapter.connectMessages(to: endpoint)
        var iterator = messages.makeAsyncIterator()
        try await adapter.send(text: "ping over TLS")
        let echoed = await iterator.next()
        #expect(echoed?.text == "ping over TLS")
        let version = await adapter.currentConnection?.tlsVersion
        await adapter.close()
        return version
    }

    static func connectError(port: Int, tls: TLSConfiguration, host: String = "localhost") async -> SwitchboardError? {
        do {
            _ = try await roundTrip(port: port, tls: tls, host: host)
            Issue.record("connected although it should have failed")
            return nil
        } catch {
            return error
        }
    }

    // MARK: Mutual TLS

    /// The server's alert (`certificate required`, `unknown ca`…) as a TLS error, or, should
    /// the server's close overtake its alert, the client's explanation of a close right after
    /// the TLS handshake.
    static func refusedForItsCertificate(_ error: SwitchboardError?) -> Bool {
        guard let error else { return false }
        if error.kind == .tls { return error.message.contains("alert") }
        return error.kind == .handshakeFailed && error.message.contains("require a client certificate")
    }

    @Test func requiredClientCertificateReachesAuthenticate() async throws {
        let pki = try TestPKI.get()
        let server = try await Server(Self.serverTLS(pki, clientCertificates: .required(trustedCAFile: pki.caCertificate)))
        var tls = TLSConfiguration(trustRoots: .caFile(pki.caCertificate))
        tls.clientCertificate = .init(certificateChainFile: pki.aliceCertificate, privateKeyFile: pki.aliceKey)
        _ = try await Self.roundTrip(port: server.port, tls: tls)
        let seen = server.seen.list.withLock { $0 }
        #expect(seen.count == 1)
        let certificate = try #require(seen.first ?? nil)
        #expect(certificate.subject == "CN=alice,O=Example")
        #expect(certificate.commonName == "alice")
        #expect(certificate.alternativeNames == [.dns("alice.example"), .email("alice@example.com"),
                                                 .uri("spiffe://example.org/alice")])
        await server.stop()
    }

    /// A subject longer than the first buffer reaches `authenticate` whole, never cut short.
    @Test func longSubjectIsNotTruncated() async throws {
        let pki = try TestPKI.get()
        let server = try await Server(Self.serverTLS(pki, clientCertificates: .required(trustedCAFile: pki.caCertificate)))
        var tls = TLSConfiguration(trustRoots: .caFile(pki.caCertificate))
        tls.clientCertificate = .init(certificateChainFile: pki.longSubjectCertificate, privateKeyFile: pki.longSubjectKey)
        _ = try await Self.roundTrip(port: server.port, tls: tls)
        let expected = "CN=long," + Array(repeating: TestPKI.longUnit, count: 20).joined(separator: ",") + ",O=Example"
        let subject = server.seen.list.withLock { $0.last??.subject }
        #expect(expected.utf8.count > 1024)
        #expect(subject == expected)
        await server.stop()
    }

    @Test func requiredClientCertificateMissingOrUntrustedFailsTheHandshake() async throws {
        let pki = try TestPKI.get()
        let server = try await Server(Self.serverTLS(pki, clientCertificates: .required(trustedCAFile: pki.caCertificate)))
        // No certificate.
        let none = await Self.connectError(port: server.port, tls: TLSConfiguration(trustRoots: .caFile(pki.caCertificate)))
        #expect(Self.refusedForItsCertificate(none), "\(String(describing: none))")
        // A certificate the CA did not issue.
        var untrusted = TLSConfiguration(trustRoots: .caFile(pki.caCertificate))
        untrusted.clientCertificate = .init(certificateChainFile: pki.selfSignedCertificate, privateKeyFile: pki.selfSignedKey)
        let other = await Self.connectError(port: server.port, tls: untrusted)
        #expect(Self.refusedForItsCertificate(other), "\(String(describing: other))")
        // Neither reached authenticate; both were counted as TLS rejections.
        #expect(server.seen.list.withLock { $0.isEmpty })
        #expect(await serverEventually { server.server.statistics.rejectedConnections == 2 })
        await server.stop()
    }

    @Test func requestedClientCertificateIsOptional() async throws {
        let pki = try TestPKI.get()
        let server = try await Server(Self.serverTLS(pki, clientCertificates: .requested(trustedCAFile: pki.caCertificate)))
        _ = try await Self.roundTrip(port: server.port, tls: TLSConfiguration(trustRoots: .caFile(pki.caCertificate)))
        var tls = TLSConfiguration(trustRoots: .caFile(pki.caCertificate))
        tls.clientCertificate = .init(certificateChainFile: pki.clientCertificate, privateKeyFile: pki.clientKey)
        _ = try await Self.roundTrip(port: server.port, tls: tls)
        let seen = server.seen.list.withLock { $0 }
        #expect(seen.count == 2)
        #expect(seen.first.flatMap { $0 } == nil)
        #expect(seen.last??.subject == "CN=client")
        #expect(seen.last??.alternativeNames == [])
        await server.stop()
    }

    @Test func encryptedClientKeyNeedsItsPassphrase() async throws {
        let pki = try TestPKI.get()
        let server = try await Server(Self.serverTLS(pki, clientCertificates: .required(trustedCAFile: pki.caCertificate)))
        var tls = TLSConfiguration(trustRoots: .caFile(pki.caCertificate))
        tls.clientCertificate = .init(certificateChainFile: pki.aliceCertificate, privateKeyFile: pki.aliceEncryptedKey,
                                      privateKeyPassphrase: TLSPassphrase(pki.alicePassphrase))
        _ = try await Self.roundTrip(port: server.port, tls: tls)
        #expect(server.seen.list.withLock { $0.last??.commonName } == "alice")

        tls.clientCertificate?.privateKeyPassphrase = "wrong passphrase"
        let wrong = await Self.connectError(port: server.port, tls: tls)
        #expect(wrong?.kind == .tls)
        #expect(wrong?.message.contains("cannot load private key") == true, "\(String(describing: wrong))")
        #expect(wrong?.message.contains("wrong passphrase?") == true, "\(String(describing: wrong))")
        #expect(wrong?.description.contains("wrong passphrase\"") == false)

        tls.clientCertificate?.privateKeyPassphrase = nil
        let missing = await Self.connectError(port: server.port, tls: tls)
        #expect(missing?.message.contains("if the key is encrypted, give its passphrase") == true,
                "\(String(describing: missing))")
        #expect(!"\(tls)".contains(pki.alicePassphrase))
        await server.stop()
    }

    @Test func encryptedServerKeyWithPassphrase() async throws {
        let pki = try TestPKI.get()
        var tlsConfig = TLSServerConfiguration(certificateChainFile: pki.serverCertificate,
                                               privateKeyFile: pki.serverEncryptedKey)
        // Without the passphrase the server refuses to start, with a hint.
        var config = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        config.tls = tlsConfig
        let refused = WebSocketServer(configuration: config)
        do {
            _ = try await refused.start()
            Issue.record("started with an encrypted key and no passphrase")
            await refused.shutdown()
        } catch {
            #expect(error.kind == .tls)
            #expect(error.message.contains("give its passphrase"), "\(error)")
        }
        tlsConfig.privateKeyPassphrase = TLSPassphrase(pki.alicePassphrase)
        let server = try await Server(tlsConfig)
        _ = try await Self.roundTrip(port: server.port, tls: TLSConfiguration(trustRoots: .caFile(pki.caCertificate)))
        await server.stop()
    }

    // MARK: Pinning

    @Test func pinsInAdditionToChainVerification() async throws {
        let pki = try TestPKI.get()
        let server = try await Server(Self.serverTLS(pki))
        let leafPin = try pki.pin(ofCertificate: pki.serverCertificate)
        let caPin = try pki.pin(ofCertificate: pki.caCertificate)
        let otherPin = try pki.pin(ofCertificate: pki.selfSignedCertificate)
        var tls = TLSConfiguration(trustRoots: .caFile(pki.caCertificate))
        // The leaf's key, or the CA's (a key of the verified chain), among other pins.
        tls.publicKeyPins = .init(sha256: [otherPin, leafPin])
        _ = try await Self.roundTrip(port: server.port, tls: tls)
        tls.publicKeyPins = .init(sha256: [caPin])
        _ = try await Self.roundTrip(port: server.port, tls: tls)
        // A pin that matches nothing: its own error kind, naming the keys the server presented.
        tls.publicKeyPins = .init(sha256: [otherPin])
        let error = try #require(await Self.connectError(port: server.port, tls: tls))
        #expect(error.kind == .certificatePinning, "\(error)")
        #expect(error.message.contains(leafPin), "\(error)")
        #expect(error.message.contains(caPin), "\(error)")
        // Pins never replace verification in this mode: an untrusted chain still fails as TLS.
        var untrusted = TLSConfiguration(trustRoots: .caFile(pki.selfSignedCertificate))
        untrusted.publicKeyPins = .init(sha256: [leafPin])
        let chainError = await Self.connectError(port: server.port, tls: untrusted)
        #expect(chainError?.kind == .tls, "\(String(describing: chainError))")
        await server.stop()
    }

    @Test func pinsInsteadOfChainVerification() async throws {
        let pki = try TestPKI.get()
        // A self-signed server no CA vouches for; the pin alone identifies it.
        let server = try await Server(TLSServerConfiguration(certificateChainFile: pki.selfSignedCertificate,
                                                             privateKeyFile: pki.selfSignedKey))
        let pin = try pki.pin(ofCertificate: pki.selfSignedCertificate)
        var tls = TLSConfiguration.default
        #expect(await Self.connectError(port: server.port, tls: tls)?.kind == .tls)
        tls.publicKeyPins = .init(sha256: [pin], mode: .insteadOfChainVerification)
        _ = try await Self.roundTrip(port: server.port, tls: tls)
        tls.publicKeyPins = .init(sha256: [try pki.pin(ofCertificate: pki.serverCertificate)],
                                  mode: .insteadOfChainVerification)
        let error = await Self.connectError(port: server.port, tls: tls)
        #expect(error?.kind == .certificatePinning, "\(String(describing: error))")
        #expect(error?.message.contains(pin) == true, "\(String(describing: error))")
        await server.stop()
    }

    @Test func malformedPinsAreRefusedBeforeConnecting() async throws {
        let pki = try TestPKI.get()
        let server = try await Server(Self.serverTLS(pki))
        for pins in [["not base64!"], ["AAAA"], []] {
            var tls = TLSConfiguration(trustRoots: .caFile(pki.caCertificate))
            tls.publicKeyPins = .init(sha256: pins)
            let error = await Self.connectError(port: server.port, tls: tls)
            #expect(error?.kind == .tls, "\(pins): \(String(describing: error))")
            #expect(error?.message.contains("pin") == true, "\(pins): \(String(describing: error))")
        }
        #expect(server.seen.list.withLock { $0.isEmpty })
        await server.stop()
    }

    // MARK: Versions

    @Test func tls12AndTls13() async throws {
        let pki = try TestPKI.get()
        let trust = TLSConfiguration(trustRoots: .caFile(pki.caCertificate))
        let both12 = try await Server(Self.serverTLS(pki, maximumVersion: .tls12))
        var client12 = trust
        client12.maximumVersion = .tls12
        #expect(try await Self.roundTrip(port: both12.port, tls: client12) == "TLSv1.2")
        // A server capped at 1.2 and a default client agree on 1.2.
        #expect(try await Self.roundTrip(port: both12.port, tls: trust) == "TLSv1.2")
        // A client that insists on 1.3 cannot talk to it.
        var client13 = trust
        client13.minimumVersion = .tls13
        let mismatch = await Self.connectError(port: both12.port, tls: client13)
        #expect(mismatch?.kind == .tls, "\(String(describing: mismatch))")
        await both12.stop()

        let default13 = try await Server(Self.serverTLS(pki))
        #expect(try await Self.roundTrip(port: default13.port, tls: trust) == "TLSv1.3")
        #expect(try await Self.roundTrip(port: default13.port, tls: client12) == "TLSv1.2")
        var inverted = trust
        inverted.minimumVersion = .tls13
        inverted.maximumVersion = .tls12
        let error = await Self.connectError(port: default13.port, tls: inverted)
        #expect(error?.message.contains("maximum TLS version is below the minimum") == true, "\(String(describing: error))")
        await default13.stop()
    }
}
