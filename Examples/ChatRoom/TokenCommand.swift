import ChatRoomCore
import Foundation
import SpawnSupport
import Switchboard

/// `chat-room join --token-command CMD`: the command that prints a token (a backend's CLI, a
/// `curl` to the login service, `cat` of a file another process keeps fresh). Run with
/// `/bin/sh -c` before every connection attempt and again at 80% of the token's lifetime (the
/// `exp` read from its payload); its standard output, trimmed, is the token.
struct TokenCommand: Sendable {
    let command: String
    /// Most output read from the command: a JWT is far shorter; more is not a token.
    static let maxOutput = 65_536

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Runs the command and returns its token (never logged nor printed).
    func token() async throws -> SocketToken {
        let command = self.command
        let output: String = try await withCheckedThrowingContinuation { continuation in
            // Blocking reads and the wait on their own thread, not on the concurrency pool.
            Thread.detachNewThread {
                continuation.resume(with: Result { try Self.run(command) })
            }
        }
        let value = output.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !value.isEmpty, !value.contains(where: { $0.isWhitespace }) else {
            throw Failure(description: "--token-command printed no token (expected one line)")
        }
        return SocketToken(value, expiresAt: TokenExpiry.of(value))
    }

    private static func run(_ command: String) throws -> String {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command]
        let stdout = Pipe()
        process.standardOutput = stdout
        process.standardInput = FileHandle.nullDevice
        try process.run()
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
}
