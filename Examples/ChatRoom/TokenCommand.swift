import ChatRoomCore
import Foundation
import SpawnSupport
import Switchboard
import Synchronization

/// `chat-room join --token-command CMD`: the command that prints a token (a backend's CLI, a
/// `curl` to the login service, `cat` of a file another process keeps fresh). Run with
/// `/bin/sh -c` before every connection attempt and again at 80% of the token's lifetime (the
/// `exp` read from its payload); its standard output, trimmed, is the token.
///
/// Bounded in time: a command still running after ``timeout`` (or when the connection attempt
/// is cancelled) is killed with everything it started in its process group, and the attempt
/// fails with a message saying so, rather than waiting for ever.
struct TokenCommand: Sendable {
    let command: String
    /// How long one run may take (`--token-timeout`).
    let timeout: Duration
    /// `--token-timeout`'s default: a login round trip, with room for a slow backend.
    static let defaultTimeout: Duration = .seconds(30)
    /// Most output read from the command: a JWT is far shorter; more is not a token.
    static let maxOutput = 65_536

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Why a run was stopped before it ended by itself.
    private enum Stop { case timedOut, cancelled }

    /// Runs the command and returns its token (never logged nor printed).
    func token() async throws -> SocketToken {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command]
        process.startsProcessGroup = true
        let stdout = Pipe()
        process.standardOutput = stdout
        process.standardInput = FileHandle.nullDevice
        try process.run()

        let stop = Mutex<Stop?>(nil)
        // Killing the group closes its ends of the pipe: the blocked read sees end of file.
        let deadline = Task { [timeout] in
            guard (try? await Task.sleep(for: timeout)) != nil else { return }  // cancelled: finished
            stop.withLock { $0 = $0 ?? .timedOut }
            process.signalProcessGroup(SIGKILL)
        }
        defer { deadline.cancel() }
        let result: Result<String, any Error> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                // Blocking reads and the wait on their own thread, not on the concurrency pool.
                Thread.detachNewThread {
                    continuation.resume(returning: Result { try Self.collect(process, output: stdout) })
                }
            }
        } onCancel: {
            stop.withLock { $0 = $0 ?? .cancelled }
            process.signalProcessGroup(SIGKILL)
        }
        let output: String
        switch (result, stop.withLock { $0 }) {
        case (.success(let text), _):
            output = text  // finished (its output complete) before or as it was stopped
        case (.failure, .timedOut?):
            throw Failure(description: "--token-command did not finish within \(Self.seconds(timeout)) s (killed)")
        case (.failure, .cancelled?):
            throw CancellationError()
        case (.failure(let error), nil):
            throw error
        }
        let value = output.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !value.isEmpty, !value.contains(where: { $0.isWhitespace }) else {
            throw Failure(description: "--token-command printed no token (expected one line)")
        }
        return SocketToken(value, expiresAt: TokenExpiry.of(value))
    }

    /// Reads the command's output until end of file (or past ``maxOutput``) and waits for it.
    private static func collect(_ process: ChildProcess, output stdout: Pipe) throws -> String {
        var data = Data()
        while data.count <= maxOutput, let chunk = try stdout.fileHandleForReading.read(upToCount: 4096), !chunk.isEmpty {
            data.append(chunk)
        }
        try? stdout.fileHandleForReading.close()
        process.waitUntilExit()
        guard process.terminationReason == .exit, process.terminationStatus == 0 else {
            throw Failure(description: "--token-command failed (status \(process.terminationStatus))")
        }
        guard data.count <= maxOutput else { throw Failure(description: "--token-command printed more than \(maxOutput) bytes") }
        return String(decoding: data, as: UTF8.self)
    }

    private static func seconds(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        return attoseconds == 0 ? "\(seconds)" : String(format: "%.3g", Double(seconds) + Double(attoseconds) / 1e18)
    }
}
