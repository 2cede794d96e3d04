#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Testing
import SwitchboardCore
@testable import Switchboard

/// TLS records read while reading is paused (issue 32): a client may send its upgrade request
/// and its first frame in one flight, as two TLS records that arrive in one read. The server
/// stops reading once the request is complete, while `authenticate` runs; the second record,
/// already read, must wait in the session until reading resumes — and then go to the new
/// connection — instead of being decrypted and handed to the handshake's HTTP parser.
@Suite("TLS: records read while reading is paused wait for it to resume")
struct TLSPausedReadingTests {
    /// A blocking TLS client over a raw socket, driving a ``TLSSession`` by hand so that it
    /// decides how records are cut and sent.
    final class Client {
        let socket: ServerRawSocket
        let tls: TLSSession
        private var plaintext: [UInt8] = []

        init(port: Int, caFile: String) throws {
            socket = try ServerRawSocket(port: port, timeout: TestEnvironment.sized(30, tsan: 120))
            tls = try TLSSession(clientWith: TLSContext.client(TLSConfiguration(trustRoots: .caFile(caFile))),
                                 serverName: "localhost")
            while try tls.handshake() != .complete {
                try flushCiphertext()
                try receiveCiphertext()
            }
            try flushCiphertext()
        }

        /// Sends all pending ciphertext in one `send`.
        func flushCiphertext() throws {
            var out: [UInt8] = []
            tls.drainCiphertext(into: &out)
            if !out.isEmpty { try socket.send(out) }
        }

        /// Encrypts each piece as a record of its own, without sending.
        func seal(_ pieces: [[UInt8]]) throws {
            for piece in pieces {
                let n = try piece.withUnsafeBytes { try tls.writePlaintext($0) }
                guard n == piece.count else { throw RawSocketFailure("TLS took \(n) of \(piece.count) bytes") }
            }
        }

        private func receiveCiphertext() throws {
            var chunk = [UInt8](repeating: 0, count: 16 << 10)
            let n = chunk.withUnsafeMutableBytes { recv(socket.fd, $0.baseAddress!, $0.count, 0) }
            guard n > 0 else { throw RawSocketFailure("recv returned \(n) (errno \(errno)): closed or timed out") }
            chunk.withUnsafeBytes { tls.receiveCiphertext(UnsafeRawBufferPointer(rebasing: $0[..<n])) }
        }

        /// Reads until `body` finds what it needs in the plaintext received so far; it returns
        /// how many bytes it used (nil: read more).
        func read<T>(_ body: ([UInt8]) throws -> (T, Int)?) throws -> T {
            var buffer = [UInt8](repeating: 0, count: 16 << 10)
            while true {
                if let (value, used) = try body(plaintext) {
                    plaintext.removeFirst(used)
                    return value
                }
                var progressed = false
                while case .bytes(let n) = try buffer.withUnsafeMutableBytes({ try tls.readPlaintext(into: $0) }), n > 0 {
                    plaintext += buffer[..<n]
                    progressed = true
                }
                try flushCiphertext()            // TLS 1.3 may answer post-handshake messages
                if !progressed { try receiveCiphertext() }
            }
        }
    }

    @Test(arguments: ["tasks", "callbacks"])
    func aFrameSentWithTheUpgradeReachesTheConnectionAfterASlowAuthenticate(api: String) async throws {
        let pki = try TestPKI.get()
        var config = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        config.loopCount = 1
        config.connection.pingInterval = nil       // the first frame back must be the echo
        config.tls = TLSServerConfiguration(certificateChainFile: pki.serverCertificate, privateKeyFile: pki.serverKey)
        let server = WebSocketServer(configuration: config)
        // Slow, so that the frame's record is certainly read while the request is decided (it
        // arrives in the same read as the request's anyway: one send of both records).
        let authenticate: @Sendable (WebSocketUpgradeRequest) async -> WebSocketAuthDecision = { _ in
            try? await Task.sleep(for: .milliseconds(200))
            return .accept()
        }
        if api == "tasks" {
            server.route("/", authenticate: authenticate) { connection in
                for await message in connection.messages() { try? await connection.send(message) }
            }
        } else {
            server.route("/", authenticate: authenticate, callbacks: WebSocketCallbacks(onMessage: { connection, message in
                _ = try? connection.sendNow(message)
            }))
        }
        let port = try await server.start()
        let echoed = try await onServerTestThread { () -> (String, Int?, [UInt8]) in
            let client = try Client(port: port, caFile: pki.caCertificate)
            // Two records, one send: the upgrade request, then a text frame.
            try client.seal([Array(ServerRawSocket.upgradeRequest().utf8),
                             ServerRawSocket.frame(opcode: 1, payload: Array("first frame".utf8))])
            try client.flushCiphertext()
            let status = try client.read { plain -> (String, Int)? in
                guard let end = plain.indices.dropLast(3).first(where: { plain[$0...$0 + 3].elementsEqual([13, 10, 13, 10]) })
                else { return nil }
                return (String(decoding: plain[..<end], as: UTF8.self).components(separatedBy: "\r\n")[0], end + 4)
            }
            let frame = try client.read { plain -> ((Int?, [UInt8]), Int)? in
                guard let h = try RawFrameHeader.parse(plain[...]), plain.count >= h.frameLength else { return nil }
                return ((Int(h.opcode), Array(plain[h.headerLength..<h.frameLength])), h.frameLength)
            }
            client.socket.close()
            return (status, frame.0, frame.1)
        }
        #expect(echoed.0.hasPrefix("HTTP/1.1 101"), "\(echoed.0)")
        #expect(echoed.1 == 1)
        #expect(String(decoding: echoed.2, as: UTF8.self) == "first frame")
        await server.shutdown()
    }
}
