#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Testing
@testable import Switchboard

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

    /// Entries in /proc/self/fd.
    static func fdCount() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
    }

    /// Descriptors of this process that are TCP sockets with `port` at either end, not listening.
    static func socketFDs(port: Int) -> Int { processSocketCount(port: port) }

    @Test func twoThousandConcurrentConnectionsEchoAndCloseCleanly() async throws {
        let n = 2000
        let limit = Self.raiseFileLimit()
        try #require(limit >= 2 * n + 256, "RLIMIT_NOFILE is \(limit): too low for \(n) client + \(n) server sockets")

        let server = WebSocketServer(configuration: .init(host: "127.0.0.1", port: 0))
        server.route("/echo", handler: echoHandler)
        let port = try await server.start()
        let baseline = Self.fdCount()

        // Phase 1: open all of them, then handshake all of them (blocking sockets, one thread).
        let clients = try await onServerTestThread { () -> UncheckedBox<[ServerRawSocket]> in
            var sockets: [ServerRawSocket] = []
            sockets.reserveCapacity(n)
            for _ in 0..<n { sockets.append(try ServerRawSocket(port: port, timeout: 20)) }
            let request = Array(ServerRawSocket.upgradeRequest(path: "/echo").utf8)
            for s in sockets { try s.send(request) }
            for (i, s) in sockets.enumerated() {
                let reply = try s.readHTTPResponse()
                guard reply.status == 101 else {
                    throw ServerRawSocket.Failure("connection \(i): \(reply.status) \(reply.bodyText)")
                }
            }
            return UncheckedBox(sockets)
        }
        #expect(await serverEventually(timeout: .seconds(20)) { server.statistics.openConnections == n },
                "open: \(server.statistics.openConnections)")
        #expect(Self.socketFDs(port: port) == 2 * n, "both ends of every connection live in this process")

        // Phase 2: one masked echo each, then a close handshake each.
        let (echoed, closed) = try await onServerTestThread { () -> (Int, Int) in
            let sockets = clients.value
            for (i, s) in sockets.enumerated() {
                try s.send(ServerRawSocket.frame(opcode: 0x1, payload: Array("echo-\(i)".utf8)))
            }
            var echoed = 0
            for (i, s) in sockets.enumerated() {
                let f = try s.readFrame()
                if f.opcode == 0x1, f.payload == Array("echo-\(i)".utf8) { echoed += 1 }
            }
            for s in sockets { try s.send(ServerRawSocket.closeFrame(code: 1000)) }
            var closed = 0
            for s in sockets {
                let f = try s.readFrame()
                // The server answers 1000 and then closes TCP first (RFC 6455 §7.1.1).
                if f.closeCode == 1000, s.readsEOF() { closed += 1 }
                s.close()
            }
            return (echoed, closed)
        }
        #expect(echoed == n)
        #expect(closed == n)

        #expect(await serverEventually(timeout: .seconds(20)) { server.statistics.openConnections == 0 },
                "open: \(server.statistics.openConnections)")
        #expect(await serverEventually(timeout: .seconds(20)) { Self.socketFDs(port: port) == 0 },
                "sockets on port \(port) still open: \(Self.socketFDs(port: port))")
        #expect(await serverEventually(timeout: .seconds(20)) { Self.fdCount() <= baseline },
                "descriptors: \(Self.fdCount()), at start \(baseline)")
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
