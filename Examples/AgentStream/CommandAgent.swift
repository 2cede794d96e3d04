import Foundation
import Switchboard
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
///   `permission_request` lines are forwarded as `{"type":"permission",…}` lines;
/// - every stdout line that is a JSON event is sent to the client verbatim (lines are
///   reassembled with `LineBuffer`, so they may arrive in any number of writes); other lines are
///   logged and dropped; stderr is logged;
/// - if the process exits without a `result` line: an `error` event (type `agent_error`), then
///   `result` / `error`;
/// - cancelling the turn sends SIGTERM, then SIGKILL 300 ms later if it is still running.
struct CommandAgent: Agent {
    let command: String

    func run(prompt: String, model: String?, turn: TurnContext) async throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "exec \(command)"]
        let stdin = Pipe(), stdout = Pipe(), stderr = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = stderr
        let lines = PipeLines(stdout.fileHandleForReading, label: "stdout")
        stderr.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if data.isEmpty {
                handle.readabilityHandler = nil
                return
            }
            for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
                log("agent stderr: \(line)")
            }
        }
        let (exitStream, exitContinuation) = AsyncStream.makeStream(of: Int32.self)
        process.terminationHandler = { p in
            exitContinuation.yield(p.terminationStatus)
            exitContinuation.finish()
        }
        try process.run()
        let pid = process.processIdentifier
        let input = StdinWriter(stdin.fileHandleForWriting)
        input.write(ChannelCommand.message(content: prompt, model: model).line)

        var sawResult = false
        await withTaskCancellationHandler {
            await withTaskGroup(of: Void.self) { group in
                for await raw in lines.stream {
                    let event = ChannelEvent(line: Data(raw))
                    switch event {
                    case .decodingFailed(let line, let reason):
                        log("agent stdout (\(reason)), dropped: \(line.prefix(200))")
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
            Self.terminate(pid)
        }
        input.close()
        var status: Int32 = -1
        for await s in exitStream { status = s }
        try Task.checkCancellation()
        if !sawResult {
            try await turn.emit(.error(message: "agent command exited with status \(status) without a result",
                                       type: "agent_error", param: nil, code: "no_result"))
            try await turn.emit(.result(numTurns: turn.number, durationMs: turn.elapsedMilliseconds,
                                        totalCostUsd: 0, subtype: .error))
        }
    }

    /// SIGTERM now (to the process group too when the child leads one), SIGKILL in 300 ms.
    static func terminate(_ pid: pid_t) {
        guard pid > 0 else { return }
        let group = getpgid(pid) == pid
        kill(pid, SIGTERM)
        if group { kill(-pid, SIGTERM) }
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(300)) {
            if kill(pid, 0) == 0 {
                kill(pid, SIGKILL)
                if group { kill(-pid, SIGKILL) }
            }
        }
    }
}

/// A pipe's bytes as lines (split with `LineBuffer`; a final unterminated line is delivered too).
final class PipeLines: Sendable {
    let stream: AsyncStream<[UInt8]>

    init(_ handle: FileHandle, label: String) {
        let (stream, continuation) = AsyncStream.makeStream(of: [UInt8].self)
        self.stream = stream
        let buffer = Mutex(LineBuffer(maxLineLength: 4 << 20))
        handle.readabilityHandler = { h in
            let data = h.availableData
            buffer.withLock { b in
                if data.isEmpty {
                    h.readabilityHandler = nil
                    if let rest = b.finish(), !rest.isEmpty { continuation.yield(rest) }
                    continuation.finish()
                    return
                }
                do {
                    try b.append(Array(data))
                } catch {
                    log("agent \(label): \(error); line dropped")
                }
                while let line = b.nextLine() { continuation.yield(line) }
            }
        }
    }
}

/// The process's stdin; writes after it closed (or the process exited) are ignored.
final class StdinWriter: Sendable {
    private let handle: Mutex<FileHandle?>

    init(_ handle: FileHandle) { self.handle = Mutex(handle) }

    func write(_ text: String) {
        handle.withLock { h in
            guard let h else { return }
            do { try h.write(contentsOf: Data(text.utf8)) } catch { }
        }
    }

    func close() {
        handle.withLock { h in
            try? h?.close()
            h = nil
        }
    }
}
