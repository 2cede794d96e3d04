import Foundation
import ExampleSupport
import SpawnSupport
import Switchboard
import SwitchboardCore
import SwitchboardChannel
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Bridges an external agent process, one process per turn:
///
/// - runs `/bin/sh -c "exec <command>"`;
/// - writes the prompt to its stdin as one line `{"type":"message","data":{"content","model"}}`
///   and keeps stdin open for the turn: the client's answers to the process's
///   `permission_request` lines are forwarded as `{"type":"permission",…}` lines. Writes never
///   block a thread (``StdinWriter``): a process that does not read its stdin cannot stall the
///   cooperative pool;
/// - every stdout line that is a JSON event is sent to the client verbatim (lines are
///   reassembled with `LineBuffer`, so they may arrive in any number of writes); other lines are
///   logged and dropped; stderr is logged;
/// - if the process exits without a `result` line: an `error` event (type `agent_error`), then
///   `result` / `error`;
/// - cancelling the turn sends SIGTERM to the process's group (it leads one: what it started
///   goes too), then SIGKILL 300 ms later.
struct CommandAgent: Agent {
    let command: String

    func run(prompt: String, model: String?, turn: TurnContext) async throws {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "exec \(command)"]
        // A group of its own: ending the turn ends what the agent started too (a child holding
        // its stdout would otherwise keep the pipe, and its reader thread, for ever).
        process.startsProcessGroup = true
        let stdin = Pipe(), stdout = Pipe(), stderr = Pipe()
        // Out of descriptors, Foundation's Pipe holds -1 (it cannot throw): the turn fails.
        for pipe in [stdin, stdout, stderr]
        where pipe.fileHandleForReading.fileDescriptor < 0 || pipe.fileHandleForWriting.fileDescriptor < 0 {
            throw AgentCommandError.noDescriptors
        }
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = stderr
        let lines = PipeLines(stdout.fileHandleForReading, label: "stdout")
        let errorLines = PipeLines(stderr.fileHandleForReading, label: "stderr")
        Task.detached {
            for await line in errorLines.stream {
                // The agent's text may echo the prompt: escaped like every peer's text.
                log("agent stderr: \(TerminalText.inline(String(decoding: line, as: UTF8.self), maxLength: 1000))")
            }
        }
        // A turn cancelled before its process started (its session ended or was evicted
        // meanwhile) starts none.
        try Task.checkCancellation()
        // With no signal blocked (see ChildProcess), so that `terminate` can end it with SIGTERM.
        try process.run()
        // Our own copy of stdin's write end (close-on-exec, so no later child inherits it and
        // keeps the pipe open), written without blocking; the Pipe's handle is closed now.
        let writeEnd = fcntl(stdin.fileHandleForWriting.fileDescriptor, F_DUPFD_CLOEXEC, 0)
        try? stdin.fileHandleForWriting.close()
        let input = StdinWriter(fd: writeEnd)
        input.write(ChannelCommand.message(content: prompt, model: model).line)

        var sawResult = false
        await withTaskCancellationHandler {
            await withTaskGroup(of: Void.self) { group in
                for await raw in lines.stream {
                    let event = ChannelEvent(line: Data(raw))
                    switch event {
                    case .decodingFailed(let line, let reason):
                        log("agent stdout (\(reason)), dropped: \(TerminalText.inline(line, maxLength: 200))")
                        continue
                    case .permissionRequest(let id, let name, let toolInput):
                        group.addTask {
                            if let decision = await turn.requestPermission(toolUseId: id, name: name, input: toolInput) {
                                input.write(ChannelCommand.permission(toolUseId: id, decision: decision).line)
                            }
                        }
                        continue
                    case .result:
                        sawResult = true
                    default:
                        break
                    }
                    do {
                        try await turn.emit(line: String(decoding: raw, as: UTF8.self))
                    } catch {
                        break
                    }
                }
                group.cancelAll()
            }
        } onCancel: {
            Self.terminate(process)
        }
        input.close()
        // stdout is at its end: the process has exited or is about to.
        let deadline = ContinuousClock.now + .seconds(5)
        while process.isRunning, ContinuousClock.now < deadline, !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(5))
        }
        try Task.checkCancellation()
        if process.isRunning { Self.terminate(process) }
        let status = process.isRunning ? -1 : process.terminationStatus
        if !sawResult {
            try await turn.emit(.error(message: "agent command exited with status \(status) without a result",
                                       type: "agent_error", param: nil, code: "no_result"))
            try await turn.emit(.result(numTurns: turn.number, durationMs: turn.elapsedMilliseconds,
                                        totalCostUsd: 0, subtype: .error))
        }
    }

    /// SIGTERM to the agent's process group now (the agent and what it started), SIGKILL 300 ms
    /// later to whatever of the group is still there.
    static func terminate(_ process: ChildProcess) {
        process.signalProcessGroup(SIGTERM)
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(300)) {
            process.signalProcessGroup(SIGKILL)
        }
    }
}

/// A pipe's bytes as lines (split with `LineBuffer`; a final unterminated line is delivered
/// too, and the stream finishes at end of file). A dedicated thread does blocking reads, so end
/// of file is always seen.
///
/// Two threads per agent process (stdout and stderr), bounded by the session cap. Dispatch read
/// sources instead (no thread waiting) crashed inside libdispatch's event loop under
/// ThreadSanitizer when sessions were evicted at the cap (SEGV in `_dispatch_event_loop_drain`),
/// so the blocking reader stays until that is understood.
final class PipeLines: Sendable {
    let stream: AsyncStream<[UInt8]>

    init(_ handle: FileHandle, label: String) {
        let (stream, continuation) = AsyncStream.makeStream(of: [UInt8].self)
        self.stream = stream
        let fd = handle.fileDescriptor
        Thread.detachNewThread {
            var buffer = LineBuffer(maxLineLength: 4 << 20)
            var chunk = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n < 0, errno == EINTR { continue }
                if n <= 0 { break }
                do {
                    try buffer.append(Array(chunk[0..<n]))
                } catch {
                    log("agent \(label): \(error); line dropped")
                }
                while let line = buffer.nextLine() { continuation.yield(line) }
            }
            if let rest = buffer.finish(), !rest.isEmpty { continuation.yield(rest) }
            continuation.finish()
            try? handle.close()
        }
    }
}

/// Why an agent command could not be started.
enum AgentCommandError: Error, CustomStringConvertible {
    /// No file descriptors left for its pipes.
    case noDescriptors

    var description: String {
        switch self {
        case .noDescriptors: "cannot start the agent command: no file descriptors left"
        }
    }
}
