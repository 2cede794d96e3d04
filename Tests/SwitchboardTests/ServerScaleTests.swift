#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Testing
@testable import Switchboard
import SwitchboardCore

extension ServerInterop {
/// Functional scale check (nothing is timed): thousands of concurrent connections to one server,
/// every one echoing and closing cleanly, and no descriptor left behind.
@Suite struct ServerScaleTests {
    /// Raises the soft RLIMIT_NOFILE to the hard limit; returns the new soft limit.
    static func raiseFileLimit() -> Int {
        var rl = rlimit()
        getrlimit(RLIMIT_NOFILE_VALUE, &rl)
        if rl.rlim_cur < rl.rlim_max {
            rl.rlim_cur = rl.rlim_max
            setrlimit(RLIMIT_NOFILE_VALUE, &rl)
            getrlimit(RLIMIT_NOFILE_VALUE, &rl)
        }
        return rl.rlim_cur >= rlim_t(Int.max) ? Int.max : Int(rl.rlim_cur)
    }

    /// Descriptors of this process that are TCP sockets with `port` at either end, not listening.
    static func socketFDs(port: Int) -> Int { processSocketCount(port: port) }

    /// 2,000 connections (1,000 under ThreadSanitizer, where each costs several times the CPU
    /// and memory) open at once. Every wait is for events — the sockets are driven in whatever
    /// order the server answers them, and the server-side counts are polled — and gives up only
    /// when nothing moves for `stall`, so a loaded machine makes it slower, never failing.
    @Test func twoThousandConcurrentConnectionsEchoAndCloseCleanly() async throws {
        let n = TestEnvironment.sized(2000, tsan: 1000)
        let stall = TestEnvironment.sized(Duration.seconds(60), tsan: .seconds(180))
        let limit = Self.raiseFileLimit()
        try #require(limit >= 2 * n + 256, "RLIMIT_NOFILE is \(limit): too low for \(n) client + \(n) server sockets")

        var configuration = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        // Nothing here may depend on the clock either. The handshake timer runs from each accept,
        // and the last of n requests is read only after all the others: no 10 s default. The
        // raw sockets answer no pings, and with a slow build a connection easily lives past a
        // ping interval plus a pong timeout (40 s by default): keepalive off, or a ping frame
        // would come first where the echo or the close frame is expected.
        configuration.connection.handshakeTimeout = stall
        configuration.connection.pingInterval = nil
        let server = WebSocketServer(configuration: configuration)
        server.route("/echo", handler: echoHandler)
        let port = try await server.start()

        // Phase 1: open all of them, then handshake all of them (one thread, answers in any order).
        let clients = try await onServerTestThread { () -> UncheckedBox<[ServerRawSocket]> in
            var sockets: [ServerRawSocket] = []
            sockets.reserveCapacity(n)
            for _ in 0..<n { sockets.append(try ServerRawSocket(port: port)) }
            let request = Array(ServerRawSocket.upgradeRequest(path: "/echo").utf8)
            for s in sockets { try s.send(request) }
            try ServerRawSocket.driveAll(sockets, stall: stall) { i, s in
                guard let reply = try s.bufferedHTTPResponse() else {
                    if s.sawEOF { throw ServerRawSocket.Failure("connection \(i): EOF before the 101") }
                    return false
                }
                guard reply.status == 101 else {
                    throw ServerRawSocket.Failure("connection \(i): \(reply.status) \(reply.bodyText)")
                }
                return true
            }
            return UncheckedBox(sockets)
        }
        #expect(await waitWhileProgressing(stall: stall, { server.statistics.openConnections }, until: { $0 == n }),
                "open: \(server.statistics.openConnections)")
        #expect(Self.socketFDs(port: port) == 2 * n, "both ends of every connection live in this process")

        // Phase 2: one masked echo each, then a close handshake each.
        let (echoed, closed) = try await onServerTestThread { () -> (Int, Int) in
            let sockets = clients.value
            for (i, s) in sockets.enumerated() {
                try s.send(ServerRawSocket.frame(opcode: 0x1, payload: Array("echo-\(i)".utf8)))
            }
            var echoed = 0
            try ServerRawSocket.driveAll(sockets, stall: stall) { i, s in
                guard let f = try s.bufferedFrame() else {
                    if s.sawEOF { throw ServerRawSocket.Failure("connection \(i): EOF before the echo") }
                    return false
                }
                if f.opcode == 0x1, f.payload == Array("echo-\(i)".utf8) { echoed += 1 }
                return true
            }
            for s in sockets { try s.send(ServerRawSocket.closeFrame(code: 1000)) }
            var closeCodes = [Int?](repeating: nil, count: sockets.count)
            var closed = 0
            try ServerRawSocket.driveAll(sockets, stall: stall) { i, s in
                // The server answers 1000 and then closes TCP first (RFC 6455 §7.1.1).
                if closeCodes[i] == nil {
                    guard let f = try s.bufferedFrame() else {
                        if s.sawEOF { throw ServerRawSocket.Failure("connection \(i): EOF before the close frame") }
                        return false
                    }
                    closeCodes[i] = f.closeCode ?? -1
                }
                guard s.sawEOF else { return false }
                if closeCodes[i] == 1000 { closed += 1 }
                s.close()
                return true
            }
            return (echoed, closed)
        }
        #expect(echoed == n)
        #expect(closed == n)

        #expect(await waitWhileProgressing(stall: stall, { server.statistics.openConnections }, until: { $0 == 0 }),
                "open: \(server.statistics.openConnections)")
        // The sockets of this server's port, not the process's descriptor count: the tests running
        // beside this one open and close their own (a fresh-clone run saw 1,403 against 1,386 at start).
        #expect(await waitWhileProgressing(stall: stall, { Self.socketFDs(port: port) }, until: { $0 == 0 }),
                "sockets on port \(port) still open: \(Self.socketFDs(port: port))")
        let s = server.statistics
        #expect(s.acceptedConnections == n, "\(s)")
        #expect(s.messagesIn == n, "\(s)")
        #expect(s.messagesOut == n, "\(s)")
        #expect(s.rejectedConnections == 0, "\(s)")
        await server.shutdown(timeout: .seconds(5))
    }
}
}

#if canImport(Glibc)
private let RLIMIT_NOFILE_VALUE = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
#else
private let RLIMIT_NOFILE_VALUE = RLIMIT_NOFILE
#endif
