#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
#if MetricsSupport
import MetricsTestKit
#endif
import Synchronization
import Testing
import SwitchboardCore
@testable import Switchboard

/// A peer that stops reading (issue 32, item 1): with bytes queued for it that the kernel does
/// not take for ``WebSocketConfiguration/writeStallTimeout``, the connection is reset and
/// everything it held released — on the server in both handler styles, and on the client.
/// Keepalive is off here, so that nothing but the write-stall deadline can end the connection.
@Suite("Write stall: a peer that stops reading is reset after writeStallTimeout")
struct WriteStallTests {
    /// What a server connection ended with, recorded by its route.
    final class Ends: Sendable {
        let statuses = Mutex<[(code: WebSocketCloseCode, error: SwitchboardError?)]>([])
        func record(_ connection: WebSocketConnection) async {
            let status = await connection.closeStatus
            let error = await connection.error
            statuses.withLock { $0.append((status?.code ?? .noStatusReceived, error)) }
        }
        var count: Int { statuses.withLock { $0.count } }
    }

    static let stallTimeout = Duration.seconds(1)

    static func server(_ adjust: (inout WebSocketServerConfiguration) -> Void = { _ in }) -> WebSocketServer {
        var config = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        config.loopCount = 1
        config.connection.pingInterval = nil
        config.connection.writeStallTimeout = stallTimeout
        adjust(&config)
        return WebSocketServer(configuration: config)
    }

    /// Floods 64 KiB echo requests without reading until the server resets the connection (the
    /// send fails); returns the bytes the kernel accepted. A socket that stays unwritable for
    /// `guardWindow` without being reset fails the test: the deadline never came.
    static func floodUntilReset(port: Int, guardWindow: Duration) async throws -> Int {
        try await onServerTestThread {
            let peer = try FloodPeer(port: port, path: "/", ioStall: guardWindow)
            let frame = FloodPeer.frame(opcode: 2, payload: [UInt8](repeating: 0x5A, count: 64 << 10))
            do {
                let result = try peer.flood(cap: 1 << 30, stopAbove: 512 << 20, stallWindow: guardWindow,
                                            next: { frame }, sample: {})
                throw RawSocketFailure("the flood ended (\(result.end.rawValue) after \(result.accepted) bytes) without a reset")
            } catch let failure as RawSocketFailure where failure.description.contains("send failed") {
                return 1                                  // the server dropped the connection
            }
        }
    }

    @Test(arguments: ["tasks", "callbacks"])
    func aServerConnectionWhosePeerStopsReadingIsResetAndReleased(api: String) async throws {
        #if MetricsSupport
        let metrics = TestMetrics()
        var config = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        config.loopCount = 1
        config.connection.pingInterval = nil
        config.connection.writeStallTimeout = Self.stallTimeout
        let server = WebSocketServer(configuration: config, metricsFactory: metrics)
        #else
        let server = Self.server()
        #endif
        let ends = Ends()
        if api == "tasks" {
            server.route("/") { connection in
                for await message in connection.messages() { try? await connection.send(message) }
                await ends.record(connection)
            }
        } else {
            server.route("/", callbacks: WebSocketCallbacks(onMessage: { connection, message in
                _ = try? connection.sendNow(message)
            }, onClose: { connection in
                Task { await ends.record(connection) }
            }))
        }
        let port = try await server.start()
        let started = ContinuousClock.now
        _ = try await Self.floodUntilReset(port: port, guardWindow: TestEnvironment.sized(.seconds(30), tsan: .seconds(120)))
        let elapsed = ContinuousClock.now - started
        #expect(await serverEventually { ends.count == 1 })
        let end = try #require(ends.statuses.withLock { $0.first })
        #expect(end.code == .abnormalClosure)
        #expect(end.error?.kind == .timedOut && end.error?.message.contains("write") == true,
                "\(String(describing: end.error))")
        #expect(await serverEventually { server.statistics.openConnections == 0 })
        let statistics = server.statistics
        #expect(statistics.writeStallCloses == 1)
        #expect(statistics.queuedBytes == 0)
        #if MetricsSupport
        #expect(metrics.counterTotal(label: "switchboard_write_stall_closes_total") == 1)
        #endif
        // Not before the deadline: the flood itself takes a moment, the reset comes after at
        // least the timeout without progress.
        #expect(elapsed >= Self.stallTimeout)
        await server.shutdown()
    }

    @Test func aSlowReaderThatKeepsTakingBytesIsNotReset() async throws {
        // 4 MiB through a reader with a 256 KiB receive buffer that takes one 64 KiB message
        // every 80 ms (about 5 s in all, several times the timeout), with bytes queued the
        // whole time: progress, however slow, keeps the connection. (A receive buffer much
        // under loopback's 64 KiB MSS would stall TCP itself: a last partial segment waits for
        // the persist timer's backoff.)
        let server = Self.server()
        server.route("/") { connection in
            for _ in 0..<64 { try? await connection.send(binary: Data(repeating: 1, count: 64 << 10)) }
            for await _ in connection.messages() {}
        }
        let port = try await server.start()
        let received = try await onServerTestThread { () -> Int in
            let socket = try ServerRawSocket(port: port, timeout: 30, receiveBuffer: 256 << 10)
            try socket.handshake()
            var total = 0
            for _ in 0..<64 {
                let frame = try socket.readFrame()
                guard frame.opcode == 2 else { throw RawSocketFailure("opcode \(frame.opcode) after \(total) bytes") }
                total += frame.payload.count
                usleep(80_000)
            }
            return total
        }
        #expect(received == 64 << 16)
        #expect(server.statistics.writeStallCloses == 0)
        await server.shutdown()
    }

    @Test func aClientWhoseServerStopsReadingIsResetAndItsSendFails() async throws {
        // The server's handler never takes a message: its inbound queue fills, it stops reading,
        // and the client's queue stays full with the kernel taking nothing.
        let server = Self.server { $0.connection.writeStallTimeout = nil }
        let (release, releaser) = AsyncStream<Void>.makeStream()
        server.route("/") { _ in for await _ in release {} }
        let port = try await server.start()
        var configuration = WebSocketConfiguration()
        configuration.pingInterval = nil
        configuration.writeStallTimeout = Self.stallTimeout
        let adapter = SocketAdapter()
        _ = try await adapter.connectMessages(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/",
                                                                           configuration: configuration))
        let connection = try #require(await adapter.currentConnection)
        var sendError: SwitchboardError?
        let payload = Data(repeating: 7, count: 64 << 10)
        // Failure guard only: without the deadline the send below would wait for ever. As
        // long under every build: the suite's busiest seconds (every test starting at once on
        // 2 cores) have made filling the server's queue and both kernels' buffers (tens of
        // MiB, masked in a debug build) outlast 30 s.
        let guardWindow = Duration.seconds(120)
        let sent = Locked(0)
        let failureGuard = Task {
            try await Task.sleep(for: guardWindow)
            Issue.record("no reset within \(guardWindow), \(sent.withLock { $0 }) messages sent")
            await connection.close(code: .goingAway)
        }
        defer { failureGuard.cancel() }
        for _ in 0..<100_000 {
            do {
                try await connection.send(binary: payload)
                sent.withLock { $0 += 1 }
            } catch {
                sendError = error
                break
            }
        }
        #expect(sendError != nil)
        #expect(await connection.closeStatus?.code == .abnormalClosure)
        let error = await connection.error
        #expect(error?.kind == .timedOut && error?.message.contains("write") == true, "\(String(describing: error))")
        await adapter.close()
        releaser.finish()
        await server.shutdown()
    }
}
