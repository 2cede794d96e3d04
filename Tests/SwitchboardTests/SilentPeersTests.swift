#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Testing

/// The library under peers that send and never read, and under a reader slower than its
/// writer (issue 32, items 1 and 2), against the `echo-server` example run as a child process so
/// that its memory is measured apart from the suites running in this process. Serialized: each
/// case loads the server flat out.
extension ServerInterop {
@Suite("Silent peers: peers that stop reading are closed, queues stay bounded", .serialized)
struct SilentPeersTests {
    /// Peers flooding at once (30 under ThreadSanitizer, where everything is 5–10× slower).
    static let peerCount = TestEnvironment.sized(150, tsan: 30)
    /// Echo requests: 64 KiB binary messages.
    static let message = 64 << 10
    /// Most a peer offers (a guard: each stops well before, once the server stops reading).
    static let perPeerCap = 16 << 20
    /// How long a peer's socket must stay unwritable before it counts as blocked.
    static let blockedWindow = TestEnvironment.sized(Duration.milliseconds(500), tsan: .seconds(2))
    /// The child's deadlines: 2 s write stall; 1 s keepalive period, pong timeout and close
    /// timeout (a peer whose echoes all fit in the kernel's buffers leaves nothing queued, so
    /// keepalive closes it: no pong, then no answer to our close).
    static let stallSeconds = 2.0
    static let keepaliveSeconds = 1.0
    /// Slack on top of the deadline for the closes: scheduling on a loaded 2-core machine,
    /// and ThreadSanitizer.
    static let closeSlack = TestEnvironment.sized(Duration.seconds(5), tsan: .seconds(30))

    /// The child's `GET /stats`.
    struct Stats: Equatable, Decodable {
        var openConnections: Int
        var queuedBytes: Int
        var writeStallCloses: Int
        var messagesIn: Int
    }

    static func stats(port: Int) async throws -> Stats {
        try await onServerTestThread {
            let socket = try ServerRawSocket(port: port, timeout: 30)
            try socket.send("GET /stats HTTP/1.1\r\nHost: localhost\r\n\r\n")
            let reply = try socket.readHTTPResponse()
            guard reply.status == 200 else { throw RawSocketFailure("/stats answered \(reply.status)") }
            return try JSONDecoder().decode(Stats.self, from: Data(reply.body))
        }
    }

    /// A connected, upgraded, non-blocking peer with a small receive buffer.
    final class Peer {
        let socket: ServerRawSocket
        var sent = 0
        var offset = 0
        var lastProgress = ContinuousClock.now
        var done = false
        var reset = false
        var blocked = false

        init(port: Int) throws {
            socket = try ServerRawSocket(port: port, timeout: 30, receiveBuffer: 4096)
            try socket.handshake()
            _ = fcntl(socket.fd, F_SETFL, fcntl(socket.fd, F_GETFL) | O_NONBLOCK)
        }
    }

    /// The peers, kept open (never reading) until the hold is over: closing a socket with
    /// unread data resets it, which would close the server's side without any deadline.
    final class Peers: @unchecked Sendable {
        // Safety: used by one thread at a time (the flooding thread, then the test after it).
        var list: [Peer] = []
    }

    @Test(arguments: ["tasks", "callbacks"])
    func peersThatSendAndNeverReadAreAllClosedAndReleased(api: String) async throws {
        let server = try await ChildServer.start("echo-server", [
            "--port", "0", "--api", api, "--no-deflate", "--stats",
            "--write-stall-timeout", "\(Self.stallSeconds)",
            "--ping-interval", "\(Self.keepaliveSeconds)", "--pong-timeout", "\(Self.keepaliveSeconds)",
            "--close-timeout", "\(Self.keepaliveSeconds)",
        ])
        defer { server.stop() }
        let port = server.port
        let count = Self.peerCount
        let blockedWindow = Self.blockedWindow
        let held = Peers()
        defer { for peer in held.list { peer.socket.close() } }
        let outcome = try await onServerTestThread { () -> (baseline: Int, peak: Int, floodEnd: ContinuousClock.Instant, sent: Int, reset: Int, blocked: Int) in
            let peers = try (0..<count).map { _ in try Peer(port: port) }
            held.list = peers
            let baseline = server.residentBytes() ?? 0
            var peak = baseline
            let frame = ServerRawSocket.frame(opcode: 2, payload: [UInt8](repeating: 0x42, count: Self.message))
            var lastSample = ContinuousClock.now
            // Round robin: each peer writes what its socket takes, until it is blocked for the
            // window (the server stopped reading it), reset (already closed), or at its cap.
            while peers.contains(where: { !$0.done }) {
                var anyProgress = false
                for peer in peers where !peer.done {
                    while peer.sent < Self.perPeerCap {
                        let n = frame.withUnsafeBytes {
                            send(peer.socket.fd, $0.baseAddress! + peer.offset, $0.count - peer.offset, Int32(MSG_NOSIGNAL))
                        }
                        if n > 0 {
                            peer.sent += n
                            peer.offset = (peer.offset + n) % frame.count
                            peer.lastProgress = .now
                            anyProgress = true
                            continue
                        }
                        let e = errno
                        if e == EINTR { continue }
                        if e == EAGAIN || e == EWOULDBLOCK {
                            if ContinuousClock.now - peer.lastProgress >= blockedWindow {
                                peer.done = true
                                peer.blocked = true
                            }
                        } else {
                            peer.reset = true            // ECONNRESET / EPIPE: the server reset it
                            peer.done = true
                        }
                        break
                    }
                    if peer.sent >= Self.perPeerCap { peer.done = true }
                }
                if !anyProgress { usleep(10_000) }
                if ContinuousClock.now - lastSample >= .milliseconds(250) {
                    peak = max(peak, server.residentBytes() ?? 0)
                    lastSample = .now
                }
            }
            let floodEnd = ContinuousClock.now
            let sent = peers.reduce(0) { $0 + $1.sent }
            let resetCount = peers.filter(\.reset).count
            return (baseline, peak, floodEnd, sent, resetCount, peers.filter(\.blocked).count)
        }
        // Hold: every connection must be closed by the server (write stall, or keepalive for a
        // peer whose echoes all fit in the kernel's buffers) and its queued bytes released.
        var peak = outcome.peak
        var last = try await Self.stats(port: port)
        let closed = await waitWhileProgressing(stall: TestEnvironment.sized(.seconds(20), tsan: .seconds(60)), {
            peak = max(peak, server.residentBytes() ?? 0)
            if let s = try? await Self.stats(port: port) { last = s }
            return last
        }, until: { $0.openConnections == 0 && $0.queuedBytes == 0 })
        let elapsed = ContinuousClock.now - outcome.floodEnd
        let growth = peak - outcome.baseline
        // Per connection the server may hold its inbound and outbound high-water marks (1 MiB
        // each by default) plus a message each way, with the allocator's slack (4 messages in
        // all); with io_uring, also what the kernel had already received into the loop's
        // receive buffers when the connection stopped reading (BackpressureAndLimits.md):
        // up to the loop's buffer pool, 1 MiB. 96 MiB on top for the read buffers and thread
        // stacks (doubled under ThreadSanitizer). A live-allocation profile of the tasks route
        // on io_uring at its peak (stop 60): 32 messages of 64 KiB per connection (16 queued
        // in, 16 out) and 109 of 150 connections holding 1 MiB received after they stopped
        // reading. Measured peaks for 150 peers: tasks +387–488 MiB on io_uring, +288–380 on
        // epoll; callbacks +167–181.
        let onIOURing = ProcessInfo.processInfo.environment["SWITCHBOARD_EVENT_LOOP"] == "io_uring"
        let heldAfterPause = onIOURing ? 1 << 20 : 0
        let growthBound = count * ((2 << 20) + 4 * Self.message + heldAfterPause) + TestEnvironment.sized(96 << 20, tsan: 192 << 20)
        let summary = "\(count) peers sent \(outcome.sent >> 20) MiB (\(outcome.blocked) blocked, \(outcome.reset) reset while flooding, "
            + "the others at the \(Self.perPeerCap >> 20) MiB cap); "
            + "all closed \(elapsed) after the flood: \(last); server RSS \(outcome.baseline >> 20) MiB after the upgrades, "
            + "peak +\(growth >> 20) MiB (bound \(growthBound >> 20) MiB)"
        print("silent peers (\(api)): \(summary)")
        #expect(closed, "\(summary)")
        #expect(last.openConnections == 0 && last.queuedBytes == 0, "\(summary)")
        // Which deadline closes a peer depends on the timing: one whose queue stays blocked goes
        // by the write stall; one whose ping goes unanswered first goes by keepalive (tasks: a
        // peer still being read; on a loaded machine, where the flood itself outlasts a
        // keepalive period, any peer: once every peer was reset while flooding, none was left
        // for the stall). Both are deadlines; WriteStallTests pins the stall's own. With tasks
        // the split is a race run to run (stall closes in seven fresh-clone runs: 4–17 of 150
        // on epoll, 0–13 on io_uring): only a callback route on epoll, which stops reading the
        // moment its queue is full, is sure to leave some to the stall (149–150 of 150 in every
        // run). On io_uring the callback route's split is a race too: 0, 13 and 76 of 150 in
        // stop 51's three runs (0 failed a fresh-clone run); why it differs from epoll is not
        // known yet.
        if api == "callbacks" && !onIOURing && outcome.reset < count {
            #expect(last.writeStallCloses >= 1, "\(summary)")
        }
        // Within the write-stall timeout (its check ticks at a quarter of it: 1.25 ×) plus one
        // keepalive period, from the moment the last peer stopped flooding; a peer with nothing
        // queued goes by keepalive: ping interval, pong timeout and close timeout.
        let deadline = max(Self.stallSeconds * 1.25 + Self.keepaliveSeconds, 3 * Self.keepaliveSeconds)
        #expect(elapsed <= .seconds(deadline) + Self.closeSlack, "\(summary)")
        #expect(growth <= growthBound, "\(summary)")
        #expect(server.isRunning)
    }

    @Test func aReaderSlowerThanItsWriterKeepsTheServersQueueStorageBounded() async throws {
        // An 8 MiB outbound high-water mark (2 MiB low), far above what the kernel takes per
        // writable event from a socket whose peer has a 64 KiB receive buffer: the server's
        // queue never empties while the client writes faster than it reads. Its storage must
        // stay bounded by the mark, not grow by every byte echoed.
        let highWaterMark = 8 << 20
        let server = try await ChildServer.start("echo-server", [
            "--port", "0", "--api", "tasks", "--no-deflate", "--ping-interval", "0",
            "--outbound-high-water-mark", "\(highWaterMark)",
        ])
        defer { server.stop() }
        let port = server.port
        let duration = Duration.seconds(20)
        // The reader's pace: 10 MiB/s (2.5 under ThreadSanitizer, whose server is slower).
        let readRate = TestEnvironment.sized(10 << 20, tsan: 5 << 19)
        let outcome = try await onServerTestThread { () -> (baseline: Int, peak: Int, written: Int, read: Int) in
            let socket = try ServerRawSocket(port: port, timeout: 30, receiveBuffer: 64 << 10)
            try socket.handshake()
            let fd = socket.fd
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            let baseline = server.residentBytes() ?? 0
            var peak = baseline
            let frame = ServerRawSocket.frame(opcode: 2, payload: [UInt8](repeating: 0x24, count: Self.message))
            var offset = 0, written = 0, read = 0
            var chunk = [UInt8](repeating: 0, count: 64 << 10)
            let start = ContinuousClock.now
            var lastSample = start
            while ContinuousClock.now - start < duration {
                // Write whatever the socket takes.
                while true {
                    let n = frame.withUnsafeBytes { send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
                    if n > 0 { written += n; offset = (offset + n) % frame.count; continue }
                    if errno == EINTR { continue }
                    guard errno == EAGAIN || errno == EWOULDBLOCK else { throw RawSocketFailure("send: errno \(errno)") }
                    break
                }
                // Read no more than the pace allows so far.
                let elapsed = ContinuousClock.now - start
                let allowed = Int(Double(readRate) * (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18))
                while read < allowed {
                    let want = min(chunk.count, allowed - read)
                    let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, want, 0) }
                    if n > 0 { read += n; continue }
                    if n == 0 { throw RawSocketFailure("the server closed the connection after \(read) bytes read") }
                    if errno == EINTR { continue }
                    guard errno == EAGAIN || errno == EWOULDBLOCK else { throw RawSocketFailure("recv: errno \(errno)") }
                    break
                }
                var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                _ = poll(&pfd, 1, 5)
                if ContinuousClock.now - lastSample >= .milliseconds(100) {
                    peak = max(peak, server.residentBytes() ?? 0)
                    lastSample = .now
                }
            }
            socket.close()
            return (baseline, peak, written, read)
        }
        let growth = outcome.peak - outcome.baseline
        // The queue holds at most the mark plus one message; its storage at most about twice
        // that after the written part is dropped, and twice again in capacity as it grows: 4 ×
        // the mark, plus the 1 MiB inbound mark and 16 MiB of slack (doubled under
        // ThreadSanitizer). Unbounded, it grows by every byte echoed (about 200 MiB in 20 s).
        let bound = 4 * highWaterMark + (1 << 20) + TestEnvironment.sized(16 << 20, tsan: 48 << 20)
        let summary = "wrote \(outcome.written >> 20) MiB, read \(outcome.read >> 20) MiB in \(duration); server RSS "
            + "\(outcome.baseline >> 20) MiB after the upgrade, peak +\(growth >> 20) MiB (bound \(bound >> 20) MiB)"
        print("slow reader: \(summary)")
        // The client kept the server's queue above the mark's low end: it wrote more than it read.
        #expect(outcome.written > outcome.read + highWaterMark / 2, "\(summary)")
        #expect(growth <= bound, "\(summary)")
        #expect(server.isRunning)
    }
}
}
