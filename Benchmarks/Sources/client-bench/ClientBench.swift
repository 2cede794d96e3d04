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

    enum Mode: String, ExpressibleByArgument { case pipelined, stream }

    @Option(help: "pipelined (against an echo server) or stream (against a line-streaming server).") var mode: Mode = .pipelined
    @Option(help: "Server address.") var host = "127.0.0.1"
    @Option(help: "Server port.") var port = 9001
    @Option(help: "Request path.") var path = "/"
    @Option(help: "Bytes per line sent, newline included (pipelined).") var size = 60
    @Option(help: "Lines in flight (pipelined).") var window = 64
    @Option(help: "Seconds measured.") var duration = 5.0
    @Option(help: "Seconds before measuring.") var warmup = 1.0

    struct Line: SocketCommand {
        var message: String
    }

    func validate() throws {
        if size < 2 { throw ValidationError("--size must be at least 2 (one character and the newline)") }
        if window < 1 { throw ValidationError("--window must be positive") }
        if !(duration > 0) || warmup < 0 { throw ValidationError("--duration must be positive, --warmup not negative") }
    }

    func run() async throws {
        var configuration = WebSocketConfiguration()
        configuration.closeTimeout = .seconds(2)
        let endpoint = try WebSocketURLEndpoint(url: "ws://\(host):\(port)\(path)", configuration: configuration)
        let socket = SocketAdapter()
        let lines = try await socket.connect(to: endpoint)

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

    /// User plus system CPU seconds of this process.
    static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
    }
}
