import Foundation
import Testing
@testable import Switchboard
import SwitchboardCore

@Suite struct TLSSessionTests {
    // MARK: Success paths

    @Test(arguments: ["localhost", "127.0.0.1", "::1", "[::1]", "localhost."])
    func handshakeWithTrustedCA(serverName: String) throws {
        let pki = try TestPKI.get()
        let pair = try TLSPair(
            client: TLSConfiguration(trustRoots: .caFile(pki.caCertificate)), serverName: serverName,
            serverCertificate: pki.serverCertificate, serverKey: pki.serverKey)
        let outcome = runHandshake(client: pair.client, server: pair.server)
        #expect(outcome.isCompleted, "\(outcome)")
        #expect(pair.client.peerVerified)
        #expect(!pair.server.peerVerified)  // the server does not request client certificates
        #expect(pair.client.negotiatedALPN == "http/1.1")
        #expect(pair.server.negotiatedALPN == "http/1.1")
        if TLSSession.ipLiteral(TLSSession.normalizedHost(serverName)) != nil {
            #expect(pair.server.requestedServerName == nil, "no SNI for IP literals")
        } else {
            #expect(pair.server.requestedServerName == "localhost")
        }
    }

    @Test func plaintextRoundTripIncludingOneMebibyte() throws {
        let pki = try TestPKI.get()
        let pair = try TLSPair(
            client: TLSConfiguration(trustRoots: .caFile(pki.caCertificate)), serverName: "localhost",
            serverCertificate: pki.serverCertificate, serverKey: pki.serverKey)
        #expect(runHandshake(client: pair.client, server: pair.server).isCompleted)

        let hello = Array("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8)
        #expect(try roundTrip(hello, from: pair.client, to: pair.server) == hello)
        let reply = Array("HTTP/1.1 101 Switching Protocols\r\n\r\n".utf8)
        #expect(try roundTrip(reply, from: pair.server, to: pair.client) == reply)

        var big = [UInt8](repeating: 0, count: 1 << 20)
        for index in big.indices { big[index] = UInt8(truncatingIfNeeded: index &* 31 &+ index >> 8) }
        #expect(try roundTrip(big, from: pair.client, to: pair.server) == big)
        #expect(try roundTrip(big, from: pair.server, to: pair.client) == big)
    }

    @Test func caDirectoryTrustRoots() throws {
        let pki = try TestPKI.get()
        let pair = try TLSPair(
            client: TLSConfiguration(trustRoots: .caDirectory(pki.caDirectory)), serverName: "localhost",
            serverCertificate: pki.serverCertificate, serverKey: pki.serverKey)
        #expect(runHandshake(client: pair.client, server: pair.server).isCompleted)
        #expect(pair.client.peerVerified)
    }

    @Test func tls13Minimum() throws {
        let pki = try TestPKI.get()
        let pair = try TLSPair(
            client: TLSConfiguration(trustRoots: .caFile(pki.caCertificate), minimumVersion: .tls13),
            serverName: "localhost", serverCertificate: pki.serverCertificate, serverKey: pki.serverKey,
            serverMinimumVersion: .tls13)
        #expect(runHandshake(client: pair.client, server: pair.server).isCompleted)
        #expect(pair.client.negotiatedProtocolVersion == "TLSv1.3")
        #expect(pair.server.negotiatedProtocolVersion == "TLSv1.3")
        let message = Array("over TLS 1.3".utf8)
        #expect(try roundTrip(message, from: pair.client, to: pair.server) == message)
    }

    @Test func closeNotifyBothWays() throws {
        let pki = try TestPKI.get()
        let pair = try TLSPair(
            client: TLSConfiguration(trustRoots: .caFile(pki.caCertificate)), serverName: "localhost",
            serverCertificate: pki.serverCertificate, serverKey: pki.serverKey)
        #expect(runHandshake(client: pair.client, server: pair.server).isCompleted)
        let last = Array("bye".utf8)
        _ = try last.withUnsafeBytes { bytes throws(TLSError) in try pair.client.writePlaintext(bytes) }
        pair.client.shutdown()
        #expect(pair.client.hasPendingCiphertext)
        transfer(from: pair.client, to: pair.server)
        let received = try readAvailable(pair.server)
        #expect(received.bytes == last)
        #expect(received.closed)
        // Stays closed.
        var scratch = [UInt8](repeating: 0, count: 16)
        let again = try scratch.withUnsafeMutableBytes { buffer throws(TLSError) in try pair.server.readPlaintext(into: buffer) }
        #expect(again == .closed)

        pair.server.shutdown()
        transfer(from: pair.server, to: pair.client)
        #expect(try readAvailable(pair.client).closed)
        // Writing after close_notify was sent is an error, not a crash.
        #expect(throws: TLSError.self) {
            try last.withUnsafeBytes { bytes throws(TLSError) in try pair.client.writePlaintext(bytes) }
        }
    }

    @Test func dangerouslyDisabledVerificationIsTheOnlyWayToAcceptSelfSigned() throws {
        let pki = try TestPKI.get()
        var configuration = TLSConfiguration()
        configuration.dangerouslyDisableCertificateVerification = true
        for serverName in ["localhost", "example.com", "10.9.8.7"] {
            let pair = try TLSPair(
                client: configuration, serverName: serverName,
                serverCertificate: pki.selfSignedCertificate, serverKey: pki.selfSignedKey)
            let outcome = runHandshake(client: pair.client, server: pair.server)
            #expect(outcome.isCompleted, "\(serverName): \(outcome)")
            #expect(!pair.client.peerVerified)
        }
    }

    @Test func serverNameOverrideDrivesSNIAndVerification() throws {
        let pki = try TestPKI.get()
        let good = try TLSPair(
            client: TLSConfiguration(trustRoots: .caFile(pki.caCertificate), serverNameOverride: "localhost"),
            serverName: "10.0.0.1", serverCertificate: pki.serverCertificate, serverKey: pki.serverKey)
        #expect(runHandshake(client: good.client, server: good.server).isCompleted)
        #expect(good.server.requestedServerName == "localhost")

        let bad = try TLSPair(
            client: TLSConfiguration(trustRoots: .caFile(pki.caCertificate), serverNameOverride: "example.com"),
            serverName: "localhost", serverCertificate: pki.serverCertificate, serverKey: pki.serverKey)
        let error = try #require(runHandshake(client: bad.client, server: bad.server).clientError)
        #expect(error.message.contains("hostname mismatch"))
    }

    @Test func alpnNotOfferedOrNotShared() throws {
        let pki = try TestPKI.get()
        for protocols in [[], ["h2"]] {
            let pair = try TLSPair(
                client: TLSConfiguration(trustRoots: .caFile(pki.caCertificate), alpnProtocols: protocols),
                serverName: "localhost", serverCertificate: pki.serverCertificate, serverKey: pki.serverKey)
            #expect(runHandshake(client: pair.client, server: pair.server).isCompleted)
            #expect(pair.client.negotiatedALPN == nil)
            #expect(pair.server.negotiatedALPN == nil)
        }
        let preferH2 = try TLSPair(
            client: TLSConfiguration(trustRoots: .caFile(pki.caCertificate), alpnProtocols: ["h2", "http/1.1"]),
            serverName: "localhost", serverCertificate: pki.serverCertificate, serverKey: pki.serverKey)
        #expect(runHandshake(client: preferH2.client, server: preferH2.server).isCompleted)
        #expect(preferH2.client.negotiatedALPN == "http/1.1")
    }

    // MARK: Verification failures

    @Test(arguments: [false, true])
    func systemTrustRejectsTestCertificates(selfSigned: Bool) throws {
        let pki = try TestPKI.get()
        let pair = try TLSPair(
            client: .default, serverName: "localhost",
            serverCertificate: selfSigned ? pki.selfSignedCertificate : pki.serverCertificate,
            serverKey: selfSigned ? pki.selfSignedKey : pki.serverKey)
        let outcome = runHandshake(client: pair.client, server: pair.server)
        let error = try #require(outcome.clientError, "\(outcome)")
        #expect(error.message.contains("certificate verify failed"), "\(error)")
        let expectedReason = selfSigned ? "self-signed certificate" : "unable to get local issuer certificate"
        #expect(error.message.contains(expectedReason), "\(error)")
        #expect(error.verificationFailure == expectedReason)
        #expect(!error.openSSLErrors.isEmpty)
        #expect(!pair.client.peerVerified)
        // The client's alert reaches the server, which fails too.
        let serverError = try #require(throws: TLSError.self) { try pair.server.handshake() }
        #expect(serverError.message.contains("alert"), "\(serverError)")
        // A failed session keeps failing instead of touching OpenSSL again.
        #expect(throws: error) { try pair.client.handshake() }
    }

    @Test func trustedCADoesNotMakeSelfSignedAcceptable() throws {
        let pki = try TestPKI.get()
        let pair = try TLSPair(
            client: TLSConfiguration(trustRoots: .caFile(pki.caCertificate)), serverName: "localhost",
            serverCertificate: pki.selfSignedCertificate, serverKey: pki.selfSignedKey)
        let error = try #require(runHandshake(client: pair.client, server: pair.server).clientError)
        #expect(error.message.contains("certificate verify failed: self-signed certificate"), "\(error)")
    }

    @Test(arguments: [("example.com", "hostname mismatch"), ("127.0.0.2", "IP address mismatch"), ("loc*", "hostname mismatch")])
    func wrongNameIsRejectedEvenWithTrustedCA(serverName: String, expected: String) throws {
        let pki = try TestPKI.get()
        let pair = try TLSPair(
            client: TLSConfiguration(trustRoots: .caFile(pki.caCertificate)), serverName: serverName,
            serverCertificate: pki.serverCertificate, serverKey: pki.serverKey)
        let outcome = runHandshake(client: pair.client, server: pair.server)
        let error = try #require(outcome.clientError, "\(outcome)")
        #expect(error.message == "certificate verify failed: \(expected)", "\(error)")
        #expect(!pair.client.peerVerified)
    }

    @Test func applicationDataWaitsForTheHandshake() throws {
        let pki = try TestPKI.get()
        let pair = try TLSPair(
            client: TLSConfiguration(trustRoots: .caFile(pki.caCertificate)), serverName: "localhost",
            serverCertificate: pki.serverCertificate, serverKey: pki.serverKey)
        let early = Array("too early".utf8)
        #expect(try early.withUnsafeBytes { bytes throws(TLSError) in try pair.client.writePlaintext(bytes) } == 0)
        #expect(!pair.client.hasPendingCiphertext)
        var scratch = [UInt8](repeating: 0, count: 16)
        let read = try scratch.withUnsafeMutableBytes { buffer throws(TLSError) in try pair.server.readPlaintext(into: buffer) }
        #expect(read == .wantMoreInput)
        #expect(!pair.client.peerVerified)
        #expect(pair.client.negotiatedProtocolVersion == nil)
        #expect(runHandshake(client: pair.client, server: pair.server).isCompleted)
        #expect(try roundTrip(early, from: pair.client, to: pair.server) == early)
    }

    @Test func garbageFromPeerFailsCleanly() throws {
        let pki = try TestPKI.get()
        let pair = try TLSPair(
            client: .default, serverName: "localhost",
            serverCertificate: pki.serverCertificate, serverKey: pki.serverKey)
        let garbage = Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        garbage.withUnsafeBytes { pair.server.receiveCiphertext($0) }
        let error = try #require(throws: TLSError.self) { try pair.server.handshake() }
        #expect(!error.message.isEmpty)
        var scratch = [UInt8](repeating: 0, count: 16)
        #expect(throws: error) {
            try scratch.withUnsafeMutableBytes { buffer throws(TLSError) in try pair.server.readPlaintext(into: buffer) }
        }
        pair.server.shutdown()  // no-op after a fatal error, must not crash
    }

    // MARK: Configuration

    @Test func defaultsAreSecure() throws {
        let configuration = TLSConfiguration.default
        #expect(configuration.trustRoots == .system)
        #expect(configuration.minimumVersion == .tls12)
        #expect(configuration.alpnProtocols == ["http/1.1"])
        #expect(configuration.clientCertificate == nil)
        #expect(configuration.serverNameOverride == nil)
        #expect(configuration.dangerouslyDisableCertificateVerification == false)
        // The system trust store is found (e.g. /etc/ssl/certs on Debian).
        let context = try TLSContext.client(.default)
        #expect(context.verifiesPeer)
        #expect(TLSContext.systemTrustStoreCandidates().contains { FileManager.default.fileExists(atPath: $0) })
        // Verification on and no name to check: refused rather than silently skipped.
        #expect(throws: TLSError.self) { try TLSSession(clientWith: context, serverName: "") }
        #expect(throws: TLSError.self) { try TLSSession(clientWith: context, serverName: "a\u{0}b") }
    }

    @Test func badConfigurationsThrow() throws {
        let pki = try TestPKI.get()
        #expect(throws: TLSError.self) { try TLSContext.client(TLSConfiguration(trustRoots: .caFile(pki.directory + "/missing.pem"))) }
        #expect(throws: TLSError.self) { try TLSContext.client(TLSConfiguration(trustRoots: .caDirectory(pki.directory + "/missing"))) }
        #expect(throws: TLSError.self) { try TLSContext.client(TLSConfiguration(alpnProtocols: [""])) }
        #expect(throws: TLSError.self) {
            try TLSContext.client(TLSConfiguration(alpnProtocols: [String(repeating: "x", count: 256)]))
        }
        #expect(throws: TLSError.self) {
            try TLSContext.server(TLSServerConfiguration(certificateChainFile: pki.serverCertificate, privateKeyFile: pki.selfSignedKey))
        }
        #expect(throws: TLSError.self) {
            try TLSContext.server(TLSServerConfiguration(certificateChainFile: pki.directory + "/nope.pem", privateKeyFile: pki.serverKey))
        }
        // Client certificate: matching pair loads, mismatched pair is refused.
        _ = try TLSContext.client(TLSConfiguration(
            trustRoots: .caFile(pki.caCertificate),
            clientCertificate: .init(certificateChainFile: pki.clientCertificate, privateKeyFile: pki.clientKey)))
        let mismatch = try #require(throws: TLSError.self) {
            try TLSContext.client(TLSConfiguration(
                trustRoots: .caFile(pki.caCertificate),
                clientCertificate: .init(certificateChainFile: pki.clientCertificate, privateKeyFile: pki.serverKey)))
        }
        #expect(!mismatch.message.contains("BEGIN"), "never echo key material")
        // Wrong-role contexts.
        let clientContext = try TLSContext.client(.default)
        let serverContext = try TLSContext.server(
            TLSServerConfiguration(certificateChainFile: pki.serverCertificate, privateKeyFile: pki.serverKey))
        #expect(throws: TLSError.self) { try TLSSession(serverWith: clientContext) }
        #expect(throws: TLSError.self) { try TLSSession(clientWith: serverContext, serverName: "localhost") }
    }

    @Test func hostClassification() {
        #expect(TLSSession.ipLiteral("127.0.0.1") == "127.0.0.1")
        #expect(TLSSession.ipLiteral("::1") == "::1")
        #expect(TLSSession.ipLiteral("fe80::1%eth0") == "fe80::1")
        #expect(TLSSession.ipLiteral("localhost") == nil)
        #expect(TLSSession.ipLiteral("1.2.3.4.example") == nil)
        #expect(TLSSession.normalizedHost("[::1]") == "::1")
        #expect(TLSSession.normalizedHost("example.com.") == "example.com")
    }

    @Test func linkedOpenSSLVersion() {
        let version = OpenSSLErrorQueue.libraryVersion
        #expect(version.hasPrefix("OpenSSL 3"), "\(version)")
    }
}
