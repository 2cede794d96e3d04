import ArgumentParser
import Foundation
import Switchboard
import SwitchboardCore
#if canImport(Glibc)
import Glibc
#endif

/// The client benchmark, through Switchboard's public client API as an application uses it:
/// `SocketAdapter.connect(to:)` for the line stream, `send(command:)` for newline-terminated
/// commands.
///
/// - `pipelined`: against an echo server, sends `--size`-byte lines (the command's text plus the
///   newline `send(command:)` appends) and keeps `--window` of them in flight: one task sends a
///   command for every line the receiving loop counts.
/// - `reply`: against an echo server, the loop applications write: `--window` lines sent first,
///   then `for await line in lines { …; try await socket.send(command: reply) }`, one reply per
///   line received, from the receiving loop itself. Each line carries its send time (16 hex
///   digits of CLOCK_MONOTONIC nanoseconds, then `x`s), so the round trip of every line is
///   measured: `p50_us` and `p99_us` are added to the result.
/// - `stream`: against a server that streams lines (`line-streamer`), counts lines received.
///
/// Counts lines received during `--duration` seconds after `--warmup` and prints one line,
/// `result mode=… lines_per_s=… lines=… cpu=…%` (the same as the Python and Node peers in
/// Benchmarks/Peers). `cpu` is this process's CPU time over the window: about 100% means the
/// client, not the server, was the bottleneck.
@main
struct ClientBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "client-bench", abstract: "Switchboard client benchmark (pipelined echo lines, or receive-only lines).")

    enum Mode: String, ExpressibleByArgument { case pipelined, reply, stream }

    @Option(help: "pipelined or reply (against an echo server), or stream (against a line-streaming server).") var mode: Mode = .pipelined
    @Option(help: "Server address.") var host = "127.0.0.1"
    @Option(help: "Server port.") var port = 9001
    @Option(help: "Request path.") var path = "/"
    @Option(help: "Bytes per line sent, newline included (pipelined).") var size = 60
    @Option(help: "Lines in flight (pipelined).") var window = 64
    enum Lines: String, ExpressibleByArgument { case stream, sequence }
    @Option(help: "How the lines are taken: stream (the AsyncStream<Data> of connect(to:)) or sequence (SocketLines, from connectLines(to:)).") var lines: Lines = .stream
    @Flag(help: "Run the receiving loop on the main actor (as top-level code in main.swift does); reply and stream modes.") var mainActor = false
    @Option(help: "Seconds measured.") var duration = 5.0
    @Option(help: "Seconds before measuring.") var warmup = 1.0

    struct Line: SocketCommand {
        var message: String
    }

    func validate() throws {
        if size < 2 { throw ValidationError("--size must be at least 2 (one character and the newline)") }
        if mode == .reply && size < 18 { throw ValidationError("--size must be at least 18 in reply mode (a 16-digit time stamp and the newline)") }
        if window < 1 { throw ValidationError("--window must be positive") }
        if !(duration > 0) || warmup < 0 { throw ValidationError("--duration must be positive, --warmup not negative") }
    }

    func run() async throws {
        var configuration = WebSocketConfiguration()
        configuration.closeTimeout = .seconds(2)
        let endpoint = try WebSocketURLEndpoint(url: "ws://\(host):\(port)\(path)", configuration: configuration)
        let socket = SocketAdapter()
        switch (lines, mainActor) {
        case (.stream, false): try await measure(socket: socket, lines: socket.connect(to: endpoint))
        case (.sequence, false): try await measure(socket: socket, lines: socket.connectLines(to: endpoint))
        case (.stream, true): try await onMainActor(socket: socket, lines: socket.connect(to: endpoint))
        case (.sequence, true): try await onMainActor(socket: socket, lines: socket.connectLines(to: endpoint))
        }
    }

    @MainActor func onMainActor<Lines: AsyncSequence<Data, Never>>(socket: SocketAdapter, lines: Lines) async throws {
        try await measure(socket: socket, lines: lines)
    }

    /// Runs the mode's loop on the caller's executor.
    nonisolated(nonsending) func measure<Lines: AsyncSequence<Data, Never>>(socket: SocketAdapter, lines: Lines) async throws {
        if mode == .reply {
            try await replyLoop(socket: socket, lines: lines)
            return
        }

        // Pipelined: a sender task turns every counted line into the next command.
        var credit: AsyncStream<Void>.Continuation?
        var sender: Task<Void, Never>?
        if mode == .pipelined {
            let (credits, continuation) = AsyncStream.makeStream(of: Void.self)
            credit = continuation
            let command = Line(message: String(repeating: "x", count: size - 1))
            let window = window
            sender = Task {
                do {
                    for _ in 0..<window { try await socket.send(command: command) }
                    for await _ in credits { try await socket.send(command: command) }
                } catch {
                    FileHandle.standardError.write(Data("client-bench: send failed: \(error)\n".utf8))
                }
            }
        }

        let clock = ContinuousClock()
        let measureFrom = clock.now + .seconds(warmup)
        let measureUntil = measureFrom + .seconds(duration)
        var measured = 0
        var measuring = false
        var cpuStart = 0.0
        var finished = false
        for await _ in lines {
            credit?.yield()
            let now = clock.now
            if now >= measureUntil { finished = true; break }
            if now >= measureFrom {
                if !measuring { measuring = true; cpuStart = Self.cpuSeconds() }
                measured += 1
            }
        }
        let cpu = Self.cpuSeconds() - cpuStart
        credit?.finish()
        sender?.cancel()
        guard finished else {
            let error = await socket.lastError
            let status = await socket.closeStatus
            let why = error.map { "\($0)" } ?? status.map { "closed: \($0)" } ?? "stream finished"
            FileHandle.standardError.write(Data("client-bench: the connection ended early: \(why)\n".utf8))
            throw ExitCode(1)
        }
        let perSecond = Double(measured) / duration
        let result = String(format: "result mode=%@ lines_per_s=%.0f lines=%d size=%d window=%d cpu=%.0f%%\n",
                            mode.rawValue, perSecond, measured, size, mode == .pipelined ? window : 0,
                            100 * cpu / duration)
        FileHandle.standardOutput.write(Data(result.utf8))
        await sender?.value
        await socket.close()
    }

    /// The reply loop: every line received is answered from the loop that received it.
    nonisolated(nonsending) func replyLoop<Lines: AsyncSequence<Data, Never>>(socket: SocketAdapter, lines: Lines) async throws {
        let padding = String(repeating: "x", count: size - 17)
        func stamped() -> Line {
            let hex = String(Self.monotonicNanoseconds(), radix: 16)
            return Line(message: String(repeating: "0", count: max(0, 16 - hex.utf8.count)) + hex + padding)
        }
        for _ in 0..<window { try await socket.send(command: stamped()) }
        let start = Self.monotonicNanoseconds()
        let measureFrom = start + UInt64(warmup * 1e9)
        let measureUntil = measureFrom + UInt64(duration * 1e9)
        var latencies: [UInt64] = []
        latencies.reserveCapacity(1 << 20)
        var cpuStart = 0.0
        var measuring = false
        var finished = false
        for await line in lines {
            let now = Self.monotonicNanoseconds()
            if now >= measureUntil { finished = true; break }
            if now >= measureFrom {
                if !measuring { measuring = true; cpuStart = Self.cpuSeconds() }
                if let sent = Self.stamp(of: line), sent <= now { latencies.append(now - sent) }
            }
            try await socket.send(command: stamped())
        }
        let cpu = Self.cpuSeconds() - cpuStart
        guard finished else {
            let error = await socket.lastError
            let status = await socket.closeStatus
            let why = error.map { "\($0)" } ?? status.map { "closed: \($0)" } ?? "stream finished"
            FileHandle.standardError.write(Data("client-bench: the connection ended early: \(why)\n".utf8))
            throw ExitCode(1)
        }
        latencies.sort()
        func percentile(_ p: Double) -> Double {
            guard !latencies.isEmpty else { return 0 }
            return Double(latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))]) / 1000
        }
        let result = String(format: "result mode=reply lines_per_s=%.0f lines=%d size=%d window=%d cpu=%.0f%% p50_us=%.0f p99_us=%.0f\n",
                            Double(latencies.count) / duration, latencies.count, size, window,
                            100 * cpu / duration, percentile(0.5), percentile(0.99))
        FileHandle.standardOutput.write(Data(result.utf8))
        await socket.close()
    }

    /// The time stamp a reply-mode line starts with (16 hex digits), if it has one.
    static func stamp(of line: Data) -> UInt64? {
        guard line.count >= 16 else { return nil }
        var value: UInt64 = 0
        for byte in line.prefix(16) {
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            default: return nil
            }
            value = value << 4 | UInt64(digit)
        }
        return value
    }

    static func monotonicNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    /// User plus system CPU seconds of this process.
    static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
    }
}
