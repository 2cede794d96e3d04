import Foundation
import Testing
@testable import Switchboard
import SwitchboardCore
#if canImport(Glibc)
import Glibc
#endif

/// Resident set size of this process, in bytes (VmRSS from /proc/self/status).
func residentBytes() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return -1 }
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        let digits = line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first
        return (digits.flatMap { Int($0) } ?? -1) * 1024
    }
    return -1
}

private struct FloodEndpoint: SocketEndpoint {
    var port: Int
    var scheme: SocketScheme { .ws }
    var host: String { "127.0.0.1" }
    var path: String { "/flood" }
}

extension ServerInterop {
@Suite("Backpressure and hostile peers", .serialized)
struct ResilienceTests {
    /// A peer floods 1 GiB at a consumer that reads nothing for a while: the consumer's
    /// connection stops reading the socket (so the sender's `send` suspends on a full queue),
    /// memory stays bounded, and once reading resumes every byte arrives, in order.
    @Test func floodAtAStalledConsumerStaysBoundedAndLosesNothing() async throws {
        let messageSize = 1 << 20
        let messageCount = 1024                      // 1 GiB in all
        let server = WebSocketServer()
        server.route("/flood") { connection in
            var payload = Data(count: messageSize)
            for i in 0..<messageCount {
                withUnsafeBytes(of: UInt32(i).bigEndian) { payload.replaceSubrange(0..<4, with: $0) }
                payload[messageSize - 1] = UInt8(truncatingIfNeeded: i)
                do { try await connection.send(binary: payload) } catch { return }
            }
            await connection.close()
        }
        let port = try await server.start()
        let adapter = SocketAdapter()
        let messages = try await adapter.connectMessages(to: FloodEndpoint(port: port))
        let before = residentBytes()
        try await Task.sleep(for: .seconds(3))       // read nothing
        let during = residentBytes()
        let stats = server.statistics
        // The sender is stuck: far less than the whole GiB has been queued.
        #expect(stats.messagesOut < messageCount / 4, "sender was not held back: \(stats.messagesOut) messages out")
        // Bound: both ends' queues (1 MiB high-water each, plus one 256 KiB read) and slack for
        // the other suites running in this process — far below the 1 GiB sent.
        let bound = 192 << 20
        #expect(during - before < bound, "RSS grew by \((during - before) >> 20) MiB while stalled")
        var expected = 0
        var bytes = 0
        for await message in messages {
            guard case .binary(let b) = message else { Issue.record("unexpected text message"); break }
            let seq = Int(b[0]) << 24 | Int(b[1]) << 16 | Int(b[2]) << 8 | Int(b[3])
            if seq != expected || b.count != messageSize || b[messageSize - 1] != UInt8(truncatingIfNeeded: seq) {
                Issue.record("message \(expected) arrived as \(seq) with \(b.count) bytes")
                break
            }
            expected += 1
            bytes += b.count
        }
        #expect(expected == messageCount)
        #expect(bytes == messageSize * messageCount)
        print("flood: RSS before \(before >> 20) MiB, while stalled \(during >> 20) MiB, after \(residentBytes() >> 20) MiB")
        await server.shutdown(timeout: .seconds(2))
    }

    /// 10,000 clients (2,500 under ThreadSanitizer, where each cycle costs the server several
    /// times the CPU) that connect and abort (some mid-handshake, some right after it) leave no
    /// descriptor and no connection behind on the server. The server works through them at its
    /// own pace: the test waits for as long as the counts keep falling.
    @Test func tenThousandConnectThenAbortCyclesLeakNothing() async throws {
        let cycles = TestEnvironment.sized(10_000, tsan: 2_500)
        var config = WebSocketServerConfiguration()
        config.connection.handshakeTimeout = .seconds(2)
        let server = WebSocketServer(configuration: config)
        server.route("*") { connection in
            for await _ in connection.messages() {}
        }
        let port = try await server.start()
        let request = Array(ServerRawSocket.upgradeRequest(path: "/").utf8)
        try await onServerTestThread {
            for i in 0..<cycles {
                let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
                guard fd >= 0 else { throw ServerRawSocket.Failure("socket: errno \(errno)") }
                var addr = sockaddr_in()
                addr.sin_family = sa_family_t(AF_INET)
                addr.sin_port = in_port_t(UInt16(port).bigEndian)
                addr.sin_addr.s_addr = inet_addr("127.0.0.1")
                let rc = withUnsafePointer(to: &addr) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                }
                guard rc == 0 else { close(fd); throw ServerRawSocket.Failure("connect: errno \(errno)") }
                switch i % 3 {
                case 0: break                                              // nothing sent
                case 1: _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count / 2, Int32(MSG_NOSIGNAL)) }
                default: _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                }
                // Abort: RST instead of FIN.
                var linger = linger(l_onoff: 1, l_linger: 0)
                _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<linger>.size))
                close(fd)
            }
        }
        let settled = await waitWhileProgressing(stall: TestEnvironment.sized(.seconds(30), tsan: .seconds(120)), {
            [processSocketCount(port: port), server.statistics.openConnections]
        }, until: { $0 == [0, 0] })
        #expect(settled, "left behind: \(processSocketCount(port: port)) sockets, \(server.statistics.openConnections) connections")
        await server.shutdown(timeout: .seconds(2))
    }

    /// A client that never answers our close frame is dropped after the close timeout.
    @Test func peerThatNeverCompletesTheCloseHandshakeIsDropped() async throws {
        var config = WebSocketServerConfiguration()
        config.connection.closeTimeout = .milliseconds(300)
        config.connection.pingInterval = nil
        let server = WebSocketServer(configuration: config)
        let serverSide = ConnectionBox()
        server.route("/close") { connection in
            await serverSide.set(connection)
            await connection.close(code: .normalClosure, reason: "bye")
        }
        let port = try await server.start()
        let code = try await onServerTestThread { () -> Int? in
            let raw = try ServerRawSocket(port: port)                  // reads time out after 60 s
            try raw.handshake(path: "/close")
            let frame = try raw.readFrame()                             // the server's close
            let eof = raw.readsEOF()                                    // we never answer it
            return eof ? frame.closeCode : nil
        }
        #expect(code == 1000)
        // The server gave up on the handshake (its close timer fired) and dropped TCP.
        let error = await serverSide.connection?.error
        #expect(error?.kind == .timedOut)
        await server.shutdown(timeout: .seconds(1))
    }
}
}
