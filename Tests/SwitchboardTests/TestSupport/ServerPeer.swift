import Foundation
@testable import Switchboard
import SwitchboardCore
import Synchronization
import SwitchboardTestSupport
import Testing

/// Runs `Peers/server_client.py` (a client built on the Python `websockets` package, which we did
/// not write) against one of our servers, and collects the JSON lines it prints.
///
/// Exit code 3 from the script means `websockets` is missing: that is a test failure with a clear
/// message, never a silent skip.
final class ServerPeer: Sendable {
    struct Result: Sendable {
        var exitCode: Int32
        var lines: [[String: any Sendable]]
        var stderr: String
        var timedOut: Bool

        /// The objects whose "event" is `event`.
        func events(_ event: String) -> [[String: any Sendable]] {
            lines.filter { ($0["event"] as? String) == event }
        }

        func first(_ event: String) -> [String: any Sendable]? { events(event).first }

        /// Everything, for failure messages.
        var transcript: String {
            "exit \(exitCode)\(timedOut ? " (killed: timeout)" : ""); stdout: \(lines); stderr: \(stderr.suffix(2000))"
        }
    }

    static let scriptURL: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()   // TestSupport
        .deletingLastPathComponent()   // SwitchboardTests
        .appendingPathComponent("Peers/server_client.py")

    private let process = Process()
    private let stdoutPipe = Pipe()
    private let stderrPipe = Pipe()
    private let stdoutReader: PipeReader
    private let stderrReader: PipeReader
    private struct Buffers {
        var out = Data()
        var err = Data()
        var lines: [[String: any Sendable]] = []
    }
    private final class Shared: Sendable {
        let buffers = Locked(Buffers())
        let exited = Locked<Int32?>(nil)
    }
    private let shared = Shared()

    /// Starts `server_client.py scenario port args…`.
    init(_ scenario: String, port: Int, _ args: [String] = []) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-u", Self.scriptURL.path, scenario, String(port)] + args
        process.standardOutput = stdoutPipe
        process.standardError = stderrPipe
        process.standardInput = FileHandle.nullDevice
        stdoutReader = PipeReader(stdoutPipe.fileHandleForReading) { [shared] d in
            shared.buffers.withLock { b in
                b.out.append(d)
                while let nl = b.out.firstIndex(of: 0x0A) {
                    let line = b.out[b.out.startIndex..<nl]
                    b.out.removeSubrange(b.out.startIndex...nl)
                    if let obj = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any] {
                        b.lines.append(obj.mapValues { Self.sendable($0) })
                    } else if !line.isEmpty {
                        b.lines.append(["event": "unparsed", "raw": String(decoding: line, as: UTF8.self)])
                    }
                }
            }
        }
        stderrReader = PipeReader(stderrPipe.fileHandleForReading) { [shared] d in
            shared.buffers.withLock { $0.err.append(d) }
        }
        process.terminationHandler = { [shared] p in shared.exited.withLock { $0 = p.terminationStatus } }
        try process.run()
    }

    private static func sendable(_ v: Any) -> any Sendable {
        switch v {
        case let s as String: return s
        case let n as NSNumber:
            // JSON true/false arrive as boolean NSNumbers (ObjC type "c"), numbers as others.
            if String(cString: n.objCType) == "c" { return n.boolValue }
            return n.intValue
        case let a as [Any]: return a.map { sendable($0) }
        case let d as [String: Any]: return d.mapValues { sendable($0) }
        case is NSNull: return Optional<Int>.none as any Sendable
        default: return String(describing: v)
        }
    }

    var lines: [[String: any Sendable]] { shared.buffers.withLock { $0.lines } }

    /// Waits until a line with `event` has been printed (true) or the process ended / timeout (false).
    /// The timeout only ends a failing wait: generous, for ThreadSanitizer on a loaded machine.
    func waitFor(event: String, count: Int = 1, timeout: Duration = .seconds(60)) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if lines.filter({ ($0["event"] as? String) == event }).count >= count { return true }
            if shared.exited.withLock({ $0 }) != nil {
                // Let the last output drain.
                try? await Task.sleep(for: .milliseconds(50))
                return lines.filter({ ($0["event"] as? String) == event }).count >= count
            }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return false
    }

    /// Waits for the process to exit (killing it after `timeout`) and returns what it printed.
    /// Records an issue when the `websockets` package is missing. The timeout only ends a hung
    /// peer: generous (the script's own waits are 60 s each).
    func finish(timeout: Duration = .seconds(120), sourceLocation: SourceLocation = #_sourceLocation) async -> Result {
        let deadline = ContinuousClock.now + timeout
        var timedOut = false
        while shared.exited.withLock({ $0 }) == nil {
            if ContinuousClock.now >= deadline {
                timedOut = true
                process.terminate()
                try? await Task.sleep(for: .milliseconds(200))
                if process.isRunning { kill(process.processIdentifier, SIGKILL) }
                process.waitUntilExit()
                break
            }
            try? await Task.sleep(for: .milliseconds(10))
        }
        // Everything the process printed, up to the end of its output.
        _ = await stdoutReader.waitUntilEnded()
        _ = await stderrReader.waitUntilEnded()
        let code = process.terminationStatus
        let result = shared.buffers.withLock { b -> Result in
            if !b.out.isEmpty {  // a last line without its newline
                for line in b.out.split(separator: 0x0A) {
                    if let obj = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any] {
                        b.lines.append(obj.mapValues { Self.sendable($0) })
                    }
                }
                b.out = Data()
            }
            return Result(exitCode: code, lines: b.lines, stderr: String(decoding: b.err, as: UTF8.self),
                          timedOut: timedOut)
        }
        if code == 3 {
            Issue.record("""
                The Python package 'websockets' is required by the server interop tests but is \
                missing: install it with `python3 -m pip install websockets`. \(result.transcript)
                """, sourceLocation: sourceLocation)
        } else if code == 127 {
            Issue.record("python3 not found on PATH (needed by the server interop tests)",
                         sourceLocation: sourceLocation)
        }
        return result
    }

    /// Runs a scenario to completion.
    static func run(_ scenario: String, port: Int, _ args: [String] = [], timeout: Duration = .seconds(120),
                    sourceLocation: SourceLocation = #_sourceLocation) async throws -> Result {
        let peer = try ServerPeer(scenario, port: port, args)
        return await peer.finish(timeout: timeout, sourceLocation: sourceLocation)
    }
}

/// Polls `condition` every 10 ms until it holds or `timeout` passes; returns its last value.
/// For conditions that must become true: the timeout only ends a failing wait, so it is
/// generous (ThreadSanitizer, parallel suites, a loaded 2-core machine).
func serverEventually(timeout: Duration = .seconds(60), _ condition: () async -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if await condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return await condition()
}
