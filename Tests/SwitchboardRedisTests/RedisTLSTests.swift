import Foundation
import Switchboard
import SwitchboardRedis
import SwitchboardTestSupport
import Testing

/// `rediss://`: the client over Switchboard's TLS to a real `redis-server` listening with TLS
/// only, with a throwaway CA made by the `openssl` CLI.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct RedisTLSTests {
    /// A CA and a server certificate for `localhost` and 127.0.0.1 (EC P-256), in a new folder.
    static func makePKI() throws -> (directory: URL, files: RedisServerProcess.TLSFiles) {
        let dir = try TestTemporaryDirectory.make(prefix: "switchboard-redis-tls")
        let script = """
            set -e
            ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
            openssl req -x509 $ec -keyout ca.key -out ca.pem -days 2 -subj "/CN=Redis Test CA" \
                -addext keyUsage=critical,keyCertSign,cRLSign
            printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\nbasicConstraints=critical,CA:FALSE\\nextendedKeyUsage=serverAuth\\n' > server.ext
            openssl req -new $ec -keyout server.key -out server.csr -subj /CN=localhost
            openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -set_serial 2 -days 2 -extfile server.ext -out server.pem
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", script]
        process.currentDirectoryURL = dir
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw RedisServerProcess.Failure("openssl failed") }
        let path = { (name: String) in dir.appendingPathComponent(name).path }
        return (dir, .init(certificate: path("server.pem"), privateKey: path("server.key"), caCertificate: path("ca.pem")))
    }

    @Test func verifiedTLSWithPasswordAndDatabase() async throws {
        let (_, files) = try Self.makePKI()
        let redis = try await RedisServerProcess(password: "tls-pw", tls: files)
        defer { withExtendedLifetime(redis) {} }
        var configuration = RedisConfiguration()
        configuration.tls = TLSConfiguration(trustRoots: .caFile(files.caCertificate))
        let client = try RedisClient(url: RedisURL("rediss://:tls-pw@localhost:\(redis.port)/1"),
                                     configuration: configuration)
        #expect(try await client.send("PING") == .simpleString("PONG"))
        try await client.send("SET", "over", "tls")
        #expect(try await client.send("GET", "over").string == "tls")
        await client.close()
    }

    @Test func unverifiableServerIsRefused() async throws {
        let (_, files) = try Self.makePKI()
        let redis = try await RedisServerProcess(tls: files)
        defer { withExtendedLifetime(redis) {} }
        // The default: the system's trust store, which does not know the test CA.
        let untrusted = try RedisClient(url: RedisURL("rediss://localhost:\(redis.port)"))
        do {
            try await untrusted.send("PING")
            Issue.record("an unverifiable certificate was accepted")
        } catch {
            #expect(error.kind == .unavailable)
            #expect(error.underlying?.kind == .tls)
        }
        // The right CA but another name: the host name is verified too.
        var configuration = RedisConfiguration()
        configuration.tls = TLSConfiguration(trustRoots: .caFile(files.caCertificate), serverNameOverride: "redis.example")
        let wrongName = try RedisClient(url: RedisURL("rediss://127.0.0.1:\(redis.port)"), configuration: configuration)
        do {
            try await wrongName.send("PING")
            Issue.record("a certificate for another name was accepted")
        } catch {
            #expect(error.underlying?.kind == .tls)
        }
    }
}
