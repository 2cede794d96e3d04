#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Synchronization
import Testing
import SwitchboardCore
@testable import Switchboard

/// A peer that sends, then shuts its side down (`shutdown(SHUT_WR)`: a FIN) while the server is
/// not reading it — its handler has not taken the messages yet, and, in the second case, the
/// server's own sends to it are blocked too. The FIN waits in the socket until reading
/// resumes; meanwhile the socket is "peer closed" (`EPOLLRDHUP`) at every look. Found by hand
/// (stop 50): both event loops then woke for it at once, every time, and spun a core at 100%
/// until the write-stall deadline (for ever without one) — epoll because the channel asked for
/// `EPOLLRDHUP` while not reading, io_uring because its polls always report it (the kernel
/// adds it to every poll's mask), so the poll for writability fired again as soon as it was
/// armed.
///
/// Each case counts the iterations of the connection's loop over 200 ms once the FIN is in and
/// the server has stopped reading: with nothing to do the loop sleeps (a few wake-ups: the
/// test's own job and timer; fewer than 50 allowed), where the spin made 19,000–28,000 (debug
/// build; a ThreadSanitizer build is 5–10 times slower, still far above the bound). Then the
/// handler takes the messages: every byte sent before the FIN arrives (io_uring lost 9 of 16
/// in the spin: a read on the spurious event took the EOF before the bytes held while reading
/// was stopped), and the connection ends.
@Suite("A peer that half-closes while the server does not read it costs no CPU")
struct HalfClosedPeerTests {
    static let messageCount = 16
    static let messageSize = 4096

    @Test(arguments: [false, true])
    func aPausedConnectionWhosePeerHalfClosesLeavesItsLoopAsleep(serverSending: Bool) async throws {
        let group = try EventLoopGroup(loopCount: 1, name: "half-closed")
        let loop = group.loops[0]
        var config = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        config.connection.pingInterval = nil
        config.connection.writeStallTimeout = nil
        config.connection.inboundHighWaterMark = 16 << 10
        config.connection.inboundLowWaterMark = 4 << 10
        let server = WebSocketServer(configuration: config, group: group)
        let (release, releaser) = AsyncStream<Void>.makeStream()
        let received = Mutex<[WebSocketMessage]>([])
        let ended = Atomic<Bool>(false)
        server.route("/") { connection in
            if serverSending {
                // 8 MiB to a peer that reads none: the kernel takes a few MiB at most, the
                // rest waits for the socket to become writable.
                Task {
                    for _ in 0..<128 {
                        guard (try? await connection.send(binary: Data(repeating: 7, count: 64 << 10))) != nil else { break }
                    }
                }
            }
            for await _ in release {}
            for await message in connection.messages() { received.withLock { $0.append(message) } }
            ended.store(true, ordering: .releasing)
        }
        let port = try await server.start()

        let socket = try await onServerTestThread { () -> SendableRawSocket in
            let socket = try ServerRawSocket(port: port, timeout: TestEnvironment.sized(30, tsan: 120), receiveBuffer: 4096)
            try socket.handshake()
            var bytes: [UInt8] = []
            for i in 0..<Self.messageCount {
                bytes += ServerRawSocket.frame(opcode: 2, payload: [UInt8](repeating: UInt8(i), count: Self.messageSize))
            }
            try socket.send(bytes)
            guard shutdown(socket.fd, Int32(SHUT_WR)) == 0 else { throw RawSocketFailure("shutdown: errno \(errno)") }
            return SendableRawSocket(socket)
        }
        defer { socket.socket.close() }
        // The server acknowledged the FIN (so every byte before it is in its socket), and, when
        // it sends, has bytes queued that the kernel would not take (it waits for writability).
        #expect(await serverEventually { socket.tcpState == Self.tcpFinWait2 }, "state \(socket.tcpState)")
        if serverSending {
            #expect(await serverEventually { server.statistics.queuedBytes > 0 })
        }
        // And has read past its inbound high-water mark (16 KiB: more than four 4 KiB
        // messages), so it has stopped reading: from here on it has nothing left to do.
        #expect(await serverEventually { server.statistics.messagesIn > 4 })
        #expect(received.withLock { $0.isEmpty })

        let before = await Self.onLoop(loop) { loop.iterations }
        let after = await withCheckedContinuation { (done: CheckedContinuation<Int, Never>) in
            loop.execute {
                _ = loop.schedule(after: .milliseconds(200)) { done.resume(returning: loop.iterations) }
            }
        }
        #expect(after - before < 50, "\(after - before) loop iterations in 200 ms with nothing to do (\(group.backend))")

        releaser.finish()
        #expect(await serverEventually { ended.load(ordering: .acquiring) })
        let messages = received.withLock { $0 }
        #expect(messages.count == Self.messageCount)
        for (i, message) in messages.enumerated() {
            #expect(message == .binary([UInt8](repeating: UInt8(i), count: Self.messageSize)))
        }
        await server.shutdown()
        group.shutdown()
    }

    /// `TCP_FIN_WAIT2` of `<netinet/tcp.h>`: our FIN sent and acknowledged.
    static let tcpFinWait2: UInt8 = 5

    static func onLoop<T: Sendable>(_ loop: EventLoop, _ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { done in loop.execute { done.resume(returning: body()) } }
    }

    /// The raw socket handed between the test's thread and its task (used by one at a time).
    struct SendableRawSocket: @unchecked Sendable {
        let socket: ServerRawSocket
        init(_ socket: ServerRawSocket) { self.socket = socket }

        /// `tcpi_state` of `TCP_INFO`.
        var tcpState: UInt8 {
            var info = tcp_info()
            var length = socklen_t(MemoryLayout<tcp_info>.size)
            guard getsockopt(socket.fd, Int32(IPPROTO_TCP), TCP_INFO, &info, &length) == 0 else { return 0 }
            return info.tcpi_state
        }
    }
}
