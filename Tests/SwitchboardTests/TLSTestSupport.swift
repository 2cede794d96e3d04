import Foundation
@testable import Switchboard
import SwitchboardCore
import SwitchboardTestSupport

/// Throwaway PKI generated once per test run with the `openssl` CLI (EC P-256 keys: fast), in a
/// temporary folder removed when the test process exits.
struct TestPKI: Sendable {
    let directory: String
    var caCertificate: String { directory + "/ca.pem" }
    /// Directory with the CA in hashed-name layout (`openssl rehash`).
    var caDirectory: String { directory + "/cadir" }
    /// Signed by the CA; SAN DNS:localhost, IP:127.0.0.1, IP:::1.
    var serverCertificate: String { directory + "/server.pem" }
    var serverKey: String { directory + "/server.key" }
    /// Self-signed; SAN DNS:localhost, IP:127.0.0.1.
    var selfSignedCertificate: String { directory + "/self.pem" }
    var selfSignedKey: String { directory + "/self.key" }
    /// Client certificate signed by the CA.
    var clientCertificate: String { directory + "/client.pem" }
    var clientKey: String { directory + "/client.key" }
    /// Client certificate signed by the CA with subject `O=Example, CN=alice` and the SANs
    /// `DNS:alice.example`, `email:alice@example.com`, `URI:spiffe://example.org/alice`.
    var aliceCertificate: String { directory + "/alice.pem" }
    var aliceKey: String { directory + "/alice.key" }
    /// ``aliceKey`` encrypted (AES-256) with ``alicePassphrase``.
    var aliceEncryptedKey: String { directory + "/alice-encrypted.key" }
    var alicePassphrase: String { "correct horse battery staple" }
    /// Client certificate signed by the CA whose subject is longer than 1 KiB:
    /// `O=Example`, then 20 × ``longUnit``, then `CN=long`.
    var longSubjectCertificate: String { directory + "/long.pem" }
    var longSubjectKey: String { directory + "/long.key" }
    static let longUnit = "OU=" + String(repeating: "u", count: 60)
    /// ``serverKey`` encrypted (AES-256) with ``alicePassphrase``.
    var serverEncryptedKey: String { directory + "/server-encrypted.key" }

    struct GenerationError: Error, CustomStringConvertible {
        var description: String
    }

    static let shared: Result<TestPKI, GenerationError> = Result { () throws(GenerationError) -> TestPKI in
        try generate()
    }

    static func get() throws -> TestPKI { try shared.get() }

    private static func generate() throws(GenerationError) -> TestPKI {
        let dir: String
        do {
            dir = try TestTemporaryDirectory.make(prefix: "switchboard-tls").path
        } catch {
            throw GenerationError(description: "test PKI setup failed: \(error)")
        }
        do {
            try FileManager.default.createDirectory(atPath: dir + "/cadir", withIntermediateDirectories: true)
            let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
            try openssl(["req", "-x509"] + ec + [
                "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=Switchboard Test CA",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            ], in: dir)
            try "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n"
                .write(toFile: dir + "/server.ext", atomically: true, encoding: .utf8)
            try "basicConstraints=critical,CA:FALSE\nextendedKeyUsage=clientAuth\n"
                .write(toFile: dir + "/client.ext", atomically: true, encoding: .utf8)
            try ("basicConstraints=critical,CA:FALSE\nextendedKeyUsage=clientAuth\n"
                + "subjectAltName=DNS:alice.example,email:alice@example.com,URI:spiffe://example.org/alice\n")
                .write(toFile: dir + "/alice.ext", atomically: true, encoding: .utf8)
            for (name, serial) in [("server", "2"), ("client", "3")] {
                try openssl(["req", "-new"] + ec + [
                    "-keyout", "\(name).key", "-out", "\(name).csr", "-subj", "/CN=\(name == "server" ? "localhost" : "client")",
                ], in: dir)
                try openssl([
                    "x509", "-req", "-in", "\(name).csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial", serial,
                    "-days", "2", "-extfile", "\(name).ext", "-out", "\(name).pem",
                ], in: dir)
            }
            try openssl(["req", "-new"] + ec + [
                "-keyout", "alice.key", "-out", "alice.csr", "-subj", "/O=Example/CN=alice",
            ], in: dir)
            try openssl([
                "x509", "-req", "-in", "alice.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial", "4",
                "-days", "2", "-extfile", "alice.ext", "-out", "alice.pem",
            ], in: dir)
            try openssl(["pkey", "-in", "alice.key", "-aes256", "-passout", "pass:correct horse battery staple",
                         "-out", "alice-encrypted.key"], in: dir)
            let longSubject = "/O=Example" + String(repeating: "/" + longUnit, count: 20) + "/CN=long"
            try openssl(["req", "-new"] + ec + ["-keyout", "long.key", "-out", "long.csr", "-subj", longSubject], in: dir)
            try openssl([
                "x509", "-req", "-in", "long.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial", "5",
                "-days", "2", "-extfile", "client.ext", "-out", "long.pem",
            ], in: dir)
            try openssl(["pkey", "-in", "server.key", "-aes256", "-passout", "pass:correct horse battery staple",
                         "-out", "server-encrypted.key"], in: dir)
            try openssl(["req", "-x509"] + ec + [
                "-keyout", "self.key", "-out", "self.pem", "-days", "2", "-subj", "/CN=localhost",
                "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
            ], in: dir)
            try FileManager.default.copyItem(atPath: dir + "/ca.pem", toPath: dir + "/cadir/ca.pem")
            try openssl(["rehash", "cadir"], in: dir)
        } catch let error as GenerationError {
            throw error
        } catch {
            throw GenerationError(description: "test PKI setup failed: \(error)")
        }
        return TestPKI(directory: dir)
    }

    /// The RFC 7469 pin of a certificate's public key (base64 SHA-256 of its DER
    /// SubjectPublicKeyInfo), computed by the `openssl` CLI, independently of our code.
    func pin(ofCertificate path: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "openssl x509 -in \"$1\" -pubkey -noout | openssl pkey -pubin -outform der "
            + "| openssl dgst -sha256 -binary | base64", "pin", path]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let pin = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard process.terminationStatus == 0, pin.count == 44 else {
            throw GenerationError(description: "cannot compute the pin of \(path): \(pin)")
        }
        return pin
    }

    private static func openssl(_ arguments: [String], in directory: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["openssl"] + arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let output = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw GenerationError(description: "openssl \(arguments.joined(separator: " ")) failed: \(String(decoding: output, as: UTF8.self))")
        }
    }
}

enum HandshakeOutcome {
    case completed
    case clientFailed(TLSError)
    case serverFailed(TLSError)
    case stalled

    var clientError: TLSError? {
        if case .clientFailed(let error) = self { return error }
        return nil
    }
    var serverError: TLSError? {
        if case .serverFailed(let error) = self { return error }
        return nil
    }
    var isCompleted: Bool {
        if case .completed = self { return true }
        return false
    }
}

/// Moves all pending ciphertext from one session into the other.
func transfer(from source: TLSSession, to destination: TLSSession) {
    var buffer: [UInt8] = []
    source.drainCiphertext(into: &buffer)
    buffer.withUnsafeBytes { destination.receiveCiphertext($0) }
}

/// Pumps bytes both ways until both handshakes complete or one side throws.
/// After a failure the failing side's alert is delivered to the other side.
func runHandshake(client: TLSSession, server: TLSSession) -> HandshakeOutcome {
    var clientDone = false
    var serverDone = false
    for _ in 0..<50 {
        do throws(TLSError) {
            if !clientDone { clientDone = try client.handshake() == .complete }
        } catch {
            transfer(from: client, to: server)
            return .clientFailed(error)
        }
        transfer(from: client, to: server)
        do throws(TLSError) {
            if !serverDone { serverDone = try server.handshake() == .complete }
        } catch {
            transfer(from: server, to: client)
            return .serverFailed(error)
        }
        transfer(from: server, to: client)
        if clientDone && serverDone && !client.hasPendingCiphertext && !server.hasPendingCiphertext {
            return .completed
        }
    }
    return .stalled
}

/// Reads plaintext until the session wants more input or the peer closed.
func readAvailable(_ session: TLSSession) throws -> (bytes: [UInt8], closed: Bool) {
    var result: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 16 * 1024)
    while true {
        let outcome = try chunk.withUnsafeMutableBytes { buffer throws(TLSError) in
            try session.readPlaintext(into: buffer)
        }
        switch outcome {
        case .bytes(let count): result.append(contentsOf: chunk[0..<count])
        case .wantMoreInput: return (result, false)
        case .closed: return (result, true)
        }
    }
}

/// Writes `payload` on `sender`, moves the ciphertext, reads it on `receiver`.
func roundTrip(_ payload: [UInt8], from sender: TLSSession, to receiver: TLSSession) throws -> [UInt8] {
    let consumed = try payload.withUnsafeBytes { bytes throws(TLSError) in try sender.writePlaintext(bytes) }
    guard consumed == payload.count else {
        throw TLSError(message: "short write: \(consumed) of \(payload.count)")
    }
    transfer(from: sender, to: receiver)
    let received = try readAvailable(receiver)
    transfer(from: receiver, to: sender)  // e.g. TLS 1.3 post-handshake replies
    return received.bytes
}

/// Contexts + sessions for the common setups.
struct TLSPair {
    let client: TLSSession
    let server: TLSSession

    init(
        client configuration: TLSConfiguration,
        serverName: String,
        serverCertificate: String,
        serverKey: String,
        serverMinimumVersion: TLSConfiguration.MinimumVersion = .tls12
    ) throws {
        let clientContext = try TLSContext.client(configuration)
        let serverContext = try TLSContext.server(
            TLSServerConfiguration(
                certificateChainFile: serverCertificate, privateKeyFile: serverKey,
                minimumVersion: serverMinimumVersion))
        client = try TLSSession(clientWith: clientContext, serverName: serverName)
        server = try TLSSession(serverWith: serverContext)
    }
}
