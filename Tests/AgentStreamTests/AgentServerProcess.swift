import Foundation
import Synchronization
import Testing
import SwitchboardChannel
import Switchboard
import SwitchboardTestSupport
import SwitchboardCore

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The built `agent-stream serve` binary, run as a subprocess on an ephemeral port.
final class AgentServerProcess: @unchecked Sendable {
    // Safety: `process` is set up in init and afterwards only terminated.
    private let process = Process()
    private let stdoutText = LockedText()
    private let stderrText = LockedText()
    private var readers: [PipeReader] = []
    let port: Int

    static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let fakeAgent = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Resources/fake_agent.py")

    /// Next to the running test bundle (`<scratch>/debug/`), else `.build/debug/agent-stream`.
    static func binary() throws -> URL {
        var candidates: [URL] = []
        if let env = ProcessInfo.processInfo.environment["AGENT_STREAM_BIN"] { candidates.append(URL(fileURLWithPath: env)) }
        let argv0 = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        candidates.append(argv0.deletingLastPathComponent().appendingPathComponent("agent-stream"))
        candidates.append(Bundle.main.bundleURL.deletingLastPathComponent().appendingPathComponent("agent-stream"))
        candidates.append(Bundle.main.bundleURL.appendingPathComponent("agent-stream"))
        if let exe = Bundle.main.executableURL {
            candidates.append(exe.deletingLastPathComponent().appendingPathComponent("agent-stream"))
        }
        candidates.append(packageRoot.appendingPathComponent(".build/debug/agent-stream"))
        for c in candidates where FileManager.default.isExecutableFile(atPath: c.path) { return c }
        throw TestFailure("agent-stream binary not found (build it first: swift build --build-tests); looked at "
            + candidates.map(\.path).joined(separator: ", "))
    }

    /// Starts `agent-stream serve --port 0 <arguments>`; `environment` is added to the test's own.
    init(_ arguments: [String] = [], environment: [String: String] = [:]) async throws {
        process.executableURL = try Self.binary()
        process.arguments = ["serve", "--port", "0"] + arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        readers = [
            PipeReader(out.fileHandleForReading) { [stdoutText] d in if !d.isEmpty { stdoutText.append(d) } },
            PipeReader(err.fileHandleForReading) { [stderrText] d in if !d.isEmpty { stderrText.append(d) } },
        ]
        try process.run()
        let deadline = ContinuousClock.now + .seconds(60)           // a failure guard only
        var found: Int?
        while found == nil, ContinuousClock.now < deadline, process.isRunning {
            let text = stdoutText.value
            if let firstLine = text.split(separator: "\n").first, text.contains("\n") {
                let prefix = "agent-stream listening on ws://127.0.0.1:"
                guard firstLine.hasPrefix(prefix), firstLine.hasSuffix("/v1/ws") else {
                    throw TestFailure("unexpected first stdout line: \(firstLine)")
                }
                found = Int(firstLine.dropFirst(prefix.count).dropLast("/v1/ws".count))
            } else {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        guard let found else {
            process.terminate()
            throw TestFailure("agent-stream did not start; stderr: \(stderrText.value)")
        }
        port = found
    }

    deinit { stop() }

    func stop() {
        if process.isRunning { process.terminate() }
    }

    var stderr: String { stderrText.value }

    /// The server's process id (its agent processes are its children).
    var pid: Int32 { process.processIdentifier }

    /// False once the server has exited (crashed, or was stopped).
    var isRunning: Bool { process.isRunning }

    /// The channel endpoint of `session`. Its handshake timeout is a minute, not 10 s: it only
    /// ends a failing wait, and under ThreadSanitizer with the whole suite running (and a
    /// server busy with a 40 MB flood) an upgrade took longer than 10 s.
    func endpoint(session: String = UUID().uuidString, token: String? = nil) throws -> ChannelEndpoint {
        var configuration = WebSocketConfiguration.default
        configuration.handshakeTimeout = .seconds(60)
        return try ChannelEndpoint(baseURL: "ws://127.0.0.1:\(port)", sessionID: session, token: token,
                                   connectTimeout: .seconds(60), configuration: configuration)
    }

    /// Polls the server's stderr for `text` (the timeout only ends a failing wait: generous).
    func waitForLog(_ text: String, timeout: Duration = .seconds(180)) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if stderr.contains(text) { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return stderr.contains(text)
    }
}

/// Reads events until `stop` says so (the event included) or the stream ends; a watchdog
/// closes the channel after `timeout`, so a missing event fails the test instead of hanging
/// (generous: it only ends a failing run).
func readEvents(_ channel: Channel, timeout: Duration = .seconds(60),
                until stop: (ChannelEvent) -> Bool) async -> [ChannelEvent] {
    let watchdog = Task {
        try await Task.sleep(for: timeout)
        await channel.close()
    }
    defer { watchdog.cancel() }
    var events: [ChannelEvent] = []
    for await event in channel.events {
        events.append(event)
        if stop(event) { break }
    }
    return events
}

func isResult(_ e: ChannelEvent) -> Bool { e.resultSubtype != nil }

/// Event types with runs of the same type collapsed: `partial partial tool_use` → `partial tool_use`.
func collapsedTypes(_ events: [ChannelEvent]) -> [String] {
    var out: [String] = []
    for e in events {
        let t = e.type ?? "?"
        if out.last != t { out.append(t) }
    }
    return out
}

func partialText(_ events: [ChannelEvent]) -> String {
    events.reduce(into: "") { s, e in if case .partial(let t) = e { s += t } }
}

func assistantText(_ events: [ChannelEvent]) -> String? {
    for e in events { if case .assistant(let t, _, _) = e { return t } }
    return nil
}

func milliseconds(_ d: Duration) -> Double {
    Double(d.components.seconds) * 1000 + Double(d.components.attoseconds) / 1e15
}

final class LockedText: Sendable {
    private let text = TestLock("")
    func append(_ d: Data) { text.withLock { $0 += String(decoding: d, as: UTF8.self) } }
    var value: String { text.withLock { $0 } }
}
