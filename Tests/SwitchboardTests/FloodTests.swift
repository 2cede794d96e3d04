#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Testing

/// A peer that floods a connection and never reads (issue 12): the server must stop reading once
/// its outbound side is backed up — pongs included — so that its memory stays bounded and the
/// flooder's own sends block, and the connection must still work once the peer reads again.
///
/// The server is the `echo-server` example, run as a child process so that its RSS is measured
/// apart from the suites running in this process (WAVE2, "Write path"). Serialized: each case
/// runs a multi-threaded server flat out.
extension ServerInterop {
@Suite("Flood: a peer that floods and never reads", .serialized)
struct FloodTests {
    enum Flood: String, CaseIterable, Sendable {
        /// Pings with 125-byte payloads: each one owes the flooder a pong it never reads.
        case pings
        /// 64 KiB binary messages: each one owes the flooder an echo it never reads.
        case data
    }

    /// Most the flooder offers in all.
    static let floodCap = 1 << 30
    /// Bytes the kernel may accept from the flooder before it blocks. The server's queues hold
    /// 1 MiB each way by default; the rest is socket buffers (tcp_wmem/tcp_rmem, up to 4 + 32 MiB
    /// here with autotuning). Once this much was accepted the verdict is in, and the flood stops
    /// early instead of pushing a broken server towards 1 GiB of memory.
    static let acceptedBound = 256 << 20
    /// Growth of the server's RSS, from just after the upgrade to its peak, that the test allows:
    /// the default 1 MiB outbound and 1 MiB inbound high-water marks, a read buffer, allocator
    /// slack — a few MiB — with margin (the data floods, bounded already, measured +3 to +5 MiB).
    /// Under ThreadSanitizer the server's memory also carries shadow and the sanitizer
    /// allocator's caches: the allowance doubles (the data floods measured +1 to +3 MiB there).
    static let rssGrowthBound = TestEnvironment.sized(16 << 20, tsan: 32 << 20)
    /// How long the flooder's socket must stay unwritable before it stops flooding. Decides only
    /// when to give up; a slow server at worst ends the flood early with fewer bytes accepted.
    static let stallWindow = TestEnvironment.sized(Duration.seconds(2), tsan: .seconds(8))
    /// Failure guard for the reading phase: no byte moving either way for this long.
    static let ioStall = TestEnvironment.sized(Duration.seconds(60), tsan: .seconds(180))

    struct Outcome: Sendable {
        var baseline = 0
        var peakDuringFlood = 0
        var peak = 0
        var accepted = 0
        var end = ""
        /// Pings or data messages handed to the socket in whole.
        var framesSent = 0
        /// Pongs (ping flood: up to the server's close frame) or echoed data messages (data flood:
        /// before the text's echo) read.
        var answers = 0
        /// Ping flood: sequence number of the last pong read (-1: none).
        var lastPong = -1
        var textEchoed = false
        var closeCode: Int?
        var eof = false
        var problems: [String] = []
        var failure: String?

        var growth: Int { peak - baseline }
        var summary: String {
            "accepted \(accepted >> 20) MiB (\(accepted) bytes, flood ended: \(end)); server RSS \(baseline >> 20) MiB after the upgrade, "
                + "peak \(peakDuringFlood >> 20) MiB while flooding, \(peak >> 20) MiB overall (+\(growth >> 20) MiB); "
                + "\(framesSent) frames sent, \(answers) answers read, last pong \(lastPong)"
        }
    }

    @Test(arguments: Flood.allCases, ["tasks", "callbacks"])
    func floodAtAPeerThatNeverReadsStaysBoundedAndRecovers(_ flood: Flood, api: String) async throws {
        // Keepalive off: the server's pings would go unanswered while the flooder is not reading,
        // and its pong timeout would then depend on how long the flood took.
        let server = try await ChildServer.start("echo-server", ["--port", "0", "--api", api, "--ping-interval", "0"])
        defer { server.stop() }
        let pid = server.pid
        let port = server.port
        let o = try await onServerTestThread { () -> Outcome in
            var o = Outcome()
            do {
                try Self.run(flood, port: port, pid: pid, into: &o)
            } catch {
                o.failure = "\(error)"
            }
            return o
        }
        print("flood \(flood.rawValue) (\(api)\(TestEnvironment.isThreadSanitized ? ", ThreadSanitizer" : "")): \(o.summary)")
        #expect(o.failure == nil, "\(o.failure ?? "") — \(o.summary)")
        #expect(o.problems.isEmpty, "\(o.problems.prefix(5)) — \(o.summary)")
        // The flooder's sends block: the server stopped reading long before 1 GiB.
        #expect(o.end == FloodPeer.FloodEnd.blocked.rawValue, "the flooder never blocked — \(o.summary)")
        #expect(o.accepted < Self.acceptedBound, "kernel accepted \(o.accepted >> 20) MiB ≥ \(Self.acceptedBound >> 20) MiB — \(o.summary)")
        // The server's memory stays bounded.
        #expect(o.baseline > 0 && o.growth < Self.rssGrowthBound,
                "server RSS grew by \(o.growth >> 20) MiB ≥ \(Self.rssGrowthBound >> 20) MiB — \(o.summary)")
        // The connection still works: everything owed arrives, then a clean close.
        #expect(o.textEchoed, "\(o.summary)")
        switch flood {
        case .pings:
            // Pongs may be coalesced, but the latest ping is answered (by the server's close).
            #expect(o.answers >= 1 && o.answers <= o.framesSent, "\(o.summary)")
            #expect(o.lastPong == o.framesSent - 1, "the last ping was not answered — \(o.summary)")
        case .data:
            #expect(o.answers == o.framesSent, "every data message is echoed, in order — \(o.summary)")
        }
        #expect(o.closeCode == 1000, "\(o.summary)")
        #expect(o.eof, "\(o.summary)")
        #expect(server.isRunning)
    }

    /// The flood and the recovery, on a thread of their own. Fills `o` as it goes, so that the
    /// numbers are there even when a step throws.
    static func run(_ flood: Flood, port: Int, pid: Int32, into o: inout Outcome) throws {
        let peer = try FloodPeer(port: port, path: "/flood", ioStall: ioStall)
        // One round trip first, so that the baseline includes a connection that has worked.
        try echo("warm-up", through: peer, into: &o)
        guard let baseline = ChildServer.residentBytes(pid: pid) else { throw FloodPeer.Failure("server gone") }
        o.baseline = baseline
        o.peak = baseline
        var peak = baseline
        let sample = {
            if let rss = ChildServer.residentBytes(pid: pid), rss > peak { peak = rss }
        }
        var source = FloodSource(flood)
        let result = try peer.flood(cap: floodCap, stopAbove: acceptedBound, stallWindow: stallWindow,
                                    next: { source.nextChunk() }, sample: sample)
        sample()
        o.accepted = result.accepted
        o.end = result.end.rawValue
        o.framesSent = source.framesSent
        o.peakDuringFlood = peak
        o.peak = peak
        defer { o.peak = peak }

        // Read again. A unique text goes out after the flood's last frame: every data message's
        // echo comes before the text's echo, every pong before the server's close frame.
        let text = "flood over \(UUID())"
        peer.queue(FloodPeer.frame(opcode: 0x1, payload: Array(text.utf8)))
        // Pongs: intact, each answering a later ping than the one before (coalescing may skip some).
        func pong(_ payload: UnsafeRawBufferPointer) {
            if let seq = source.check(payload), seq > o.lastPong, seq < o.framesSent {
                o.lastPong = seq
            } else {
                o.problems.append("pong \(o.answers): bad or out of order (after \(o.lastPong))")
            }
            o.answers += 1
        }
        try peer.pump(sample: sample) {
            while !o.textEchoed, try peer.nextFrame({ frame in
                switch frame.opcode {
                case 0xA where flood == .pings:
                    pong(frame.payload)
                case 0x2 where flood == .data:
                    if frame.fin, source.check(frame.payload) == o.answers {
                        // in order, intact
                    } else {
                        o.problems.append("echo \(o.answers): wrong, damaged or out of order")
                    }
                    o.answers += 1
                case 0x1:
                    if Array(frame.payload) == Array(text.utf8) {
                        o.textEchoed = true
                    } else {
                        o.problems.append("unexpected text: \(String(decoding: frame.payload, as: UTF8.self).prefix(80))")
                    }
                case 0x9:
                    peer.queue(FloodPeer.frame(opcode: 0xA, payload: Array(frame.payload)))
                case 0x8:
                    throw FloodPeer.Failure("the server closed with \(frame.closeCode.map(String.init) ?? "no code") before echoing")
                default:
                    o.problems.append("unexpected frame, opcode \(frame.opcode), \(frame.payload.count) bytes")
                }
            }) {}
            return o.textEchoed
        }

        // A clean close handshake: our 1000, the server's 1000, then the server closes TCP.
        peer.queue(ServerRawSocket.closeFrame(code: 1000))
        try peer.pump(sample: sample) {
            while o.closeCode == nil, try peer.nextFrame({ frame in
                switch frame.opcode {
                case 0x8: o.closeCode = frame.closeCode ?? -1
                case 0xA where flood == .pings: pong(frame.payload)
                case 0x9: break
                default: o.problems.append("frame after the text's echo: opcode \(frame.opcode)")
                }
            }) {}
            return o.closeCode != nil
        }
        try peer.waitForEOF()
        o.eof = true
    }

    /// Sends one text and waits for its echo, before any flooding.
    static func echo(_ text: String, through peer: FloodPeer, into o: inout Outcome) throws {
        peer.queue(FloodPeer.frame(opcode: 0x1, payload: Array(text.utf8)))
        var echoed = false
        try peer.pump {
            while !echoed, try peer.nextFrame({ frame in
                echoed = frame.opcode == 0x1 && Array(frame.payload) == Array(text.utf8)
                if !echoed { o.problems.append("before the flood: unexpected frame \(frame.opcode)") }
            }) {}
            return echoed
        }
    }
}

}

/// The frames of a flood, in chunks of whole masked frames. Each payload starts with its
/// sequence number (8 bytes, big-endian); the rest is a fixed pattern, so an answer (pong or
/// echo) can be checked for damage and order.
struct FloodSource {
    let flood: ServerInterop.FloodTests.Flood
    let payloadSize: Int
    let framesPerChunk: Int
    /// The unmasked payload of frame 0.
    private let pattern: [UInt8]
    private var chunk: [UInt8]
    private let headerSize: Int
    private(set) var framesSent = 0

    init(_ flood: ServerInterop.FloodTests.Flood) {
        self.flood = flood
        switch flood {
        case .pings: payloadSize = 125; framesPerChunk = 512          // 64 KiB+ of 131-byte frames
        case .data: payloadSize = 64 << 10; framesPerChunk = 1        // one 64 KiB message
        }
        pattern = (0..<payloadSize).map { $0 < 8 ? 0 : UInt8(truncatingIfNeeded: $0 &* 7 &+ 1) }
        let one = FloodPeer.frame(opcode: flood == .pings ? 0x9 : 0x2, payload: pattern)
        headerSize = one.count - payloadSize
        chunk = Array([[UInt8]](repeating: one, count: framesPerChunk).joined())
    }

    /// The next chunk: the same frames, numbered on.
    mutating func nextChunk() -> [UInt8] {
        let frameSize = headerSize + payloadSize
        let key = FloodPeer.maskingKey
        chunk.withUnsafeMutableBytes { bytes in
            for f in 0..<framesPerChunk {
                let seq = UInt64(framesSent + f)
                let payload = f * frameSize + headerSize
                for i in 0..<8 {
                    bytes[payload + i] = UInt8(truncatingIfNeeded: seq >> (56 - 8 * UInt64(i))) ^ key[i & 3]
                }
            }
        }
        framesSent += framesPerChunk
        return chunk
    }

    /// The sequence number of an answer whose payload is intact, else nil.
    func check(_ payload: UnsafeRawBufferPointer) -> Int? {
        guard payload.count == payloadSize else { return nil }
        let intact = pattern.withUnsafeBytes { memcmp($0.baseAddress! + 8, payload.baseAddress! + 8, payloadSize - 8) == 0 }
        guard intact else { return nil }
        return Int((0..<8).reduce(UInt64(0)) { $0 << 8 | UInt64(payload[$1]) })
    }
}
