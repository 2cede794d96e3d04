import Foundation
import SwitchboardTestSupport
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

/// Paths of the package and of the built `chat-room` binary.
enum ChatPaths {
    /// Package root: three levels up from this file (Tests/ChatRoomTests/Support/…).
    static let packageRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static let peers = packageRoot.appendingPathComponent("Tests/ChatRoomTests/Peers")

    /// The `chat-room` next to the running test bundle (same scratch path), else the newest
    /// `.build*/debug/chat-room` in the package.
    static func binary() throws -> URL {
        let fm = FileManager.default
        var candidates: [URL] = []
        for start in [CommandLine.arguments.first.map { URL(fileURLWithPath: $0) }, URL(fileURLWithPath: Bundle.main.bundlePath)] {
            var dir = start?.deletingLastPathComponent()
            // The bundle may be nested (e.g. X.xctest/Contents/MacOS/X): walk up a few levels.
            for _ in 0..<4 {
                guard let d = dir else { break }
                candidates.append(d.appendingPathComponent("chat-room"))
                dir = d.deletingLastPathComponent()
            }
        }
        if let found = candidates.first(where: { fm.isExecutableFile(atPath: $0.path) }) { return found }
        let scratch = (try? fm.contentsOfDirectory(atPath: packageRoot.path))?.filter { $0 == ".build" || $0.hasPrefix(".build-") } ?? []
        let built = scratch.map { packageRoot.appendingPathComponent("\($0)/debug/chat-room") }
            .filter { fm.isExecutableFile(atPath: $0.path) }
            .sorted { mtime($0) > mtime($1) }
        guard let newest = built.first else {
            throw TestFailure("chat-room binary not found next to the test bundle (\(CommandLine.arguments.first ?? "?")) nor in .build*/debug; build it first")
        }
        return newest
    }

    private static func mtime(_ url: URL) -> Date {
        ((try? FileManager.default.attributesOfItem(atPath: url.path))?[.modificationDate] as? Date) ?? .distantPast
    }

    /// A new empty folder, removed when the test process exits.
    static func tempDirectory() throws -> URL {
        try TestTemporaryDirectory.make(prefix: "chat-room-tests")
    }
}

/// A child process with piped stdin/stdout/stderr; stdout is collected line by line.
final class ChildProcess: Sendable {
    private struct State {
        var out = Data(); var lines: [String] = []; var err = Data()
        /// End of file seen on stdout / stderr: everything the child wrote is in.
        var outEnded = false, errEnded = false
    }
    private final class Box: Sendable { let state = TestLock(State()) }
    private let box = Box()
    let process: Process
    private let stdin = Pipe()
    private let stdoutReader: PipeReader
    private let stderrReader: PipeReader

    init(executable: URL, arguments: [String], environment: [String: String]? = nil) throws {
        process = Process()
        process.executableURL = executable
        process.arguments = arguments
        if let environment { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        let stdout = Pipe(), stderr = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = stderr
        stdoutReader = PipeReader(stdout.fileHandleForReading) { [box] chunk in
            box.state.withLock { s in
                s.out.append(chunk)
                while let nl = s.out.firstIndex(of: 0x0A) {
                    s.lines.append(String(decoding: s.out[s.out.startIndex..<nl], as: UTF8.self))
                    s.out.removeSubrange(s.out.startIndex...nl)
                }
            }
            if chunk.isEmpty {
                box.state.withLock { $0.outEnded = true }
            }
        }
        stderrReader = PipeReader(stderr.fileHandleForReading) { [box] chunk in
            box.state.withLock { s in
                s.err.append(chunk)
                if chunk.isEmpty { s.errEnded = true }
            }
        }
        try process.run()
    }

    var lines: [String] { box.state.withLock { $0.lines } }
    var stderrText: String { box.state.withLock { String(decoding: $0.err, as: UTF8.self) } }

    /// Waits for a stdout line satisfying `predicate` (searching all lines so far, or those from
    /// index `from` on). The timeout only ends a failing wait: generous (ThreadSanitizer builds,
    /// a loaded machine).
    @discardableResult
    func waitForLine(timeout: Duration = .seconds(60), from start: Int = 0, _ what: String = "line",
                     where predicate: (String) -> Bool) async throws -> String {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let line = lines.dropFirst(start).first(where: predicate) { return line }
            if !process.isRunning, let line = lines.dropFirst(start).first(where: predicate) { return line }
            try await Task.sleep(for: .milliseconds(20))
        }
        let exit = process.isRunning ? "still running"
            : "exited: status \(process.terminationStatus), reason \(process.terminationReason == .exit ? "exit" : "signal")"
        throw TestFailure("timed out waiting for \(what) (\(exit)); stdout: \(lines.suffix(20)) stderr: \(stderrText.suffix(2000))")
    }

    func write(_ text: String) {
        stdin.fileHandleForWriting.write(Data(text.utf8))
    }

    func closeStdin() { try? stdin.fileHandleForWriting.close() }

    func signal(_ sig: Int32) { if process.isRunning { kill(process.processIdentifier, sig) } }

    /// Waits for exit, and for the end of its stdout and stderr (so that ``lines`` and
    /// ``stderrText`` hold everything it wrote: the exit can be seen before the last bytes were
    /// read); kills after `timeout` (a failure guard: generous). Returns the exit status.
    @discardableResult
    func waitForExit(timeout: Duration = .seconds(60)) async -> Int32 {
        let deadline = ContinuousClock.now + timeout
        while process.isRunning && ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(20)) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL); process.waitUntilExit() }
        // A grandchild holding the pipes open would keep them from ending: bounded by the deadline.
        while !box.state.withLock({ $0.outEnded && $0.errEnded }) && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
        return process.terminationStatus
    }

    deinit { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
}

/// A running `chat-room` server.
final class ChatServerProcess: Sendable {
    let child: ChildProcess
    let port: Int
    var wsURL: String { "ws://127.0.0.1:\(port)/v1/ws" }
    var httpURL: String { "http://127.0.0.1:\(port)/" }

    /// Starts `chat-room serve --port 0 --db <db>` and waits for its first stdout line.
    convenience init(db: URL, extraArguments: [String] = []) async throws {
        try await self.init(arguments: ["--db", db.path] + extraArguments)
    }

    /// Starts `chat-room serve --port 0 --redis <url>` (rooms shared through Redis).
    convenience init(redis url: String, extraArguments: [String] = []) async throws {
        try await self.init(arguments: ["--redis", url] + extraArguments)
    }

    /// Starts `chat-room serve --port 0 <arguments>` and waits for its first stdout line.
    init(arguments: [String]) async throws {
        child = try ChildProcess(executable: try ChatPaths.binary(), arguments: ["serve", "--port", "0"] + arguments)
        let first = try await child.waitForLine(timeout: .seconds(60), "the listening line") { $0.contains("listening on") }
        guard let range = first.range(of: "ws://127.0.0.1:"),
              let port = Int(first[range.upperBound...].prefix(while: \.isNumber)) else {
            throw TestFailure("cannot parse the port from \(first.debugDescription)")
        }
        self.port = port
    }

    /// SIGTERM and wait for a clean exit.
    func stop() async -> Int32 {
        child.signal(SIGTERM)
        return await child.waitForExit(timeout: .seconds(60))
    }
}
