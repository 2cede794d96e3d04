#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
@testable import Switchboard
import SwitchboardCore
import Synchronization
import SwitchboardTestSupport

/// A peer process nobody here wrote: `Peers/ws_echo_server.py` (Python `websockets`), started
/// with `Process`, torn down by ``withInteropPeer(_:_:)``. Its stdout is read line by line.
final class InteropPeer: @unchecked Sendable {  // Process/Pipe: only terminate() mutates, once
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    let port: Int
    private let process: Process
    private let stdin: Pipe
    private let output: InteropOutput
    private let errors: InteropOutput
    private let stdoutReader: PipeReader
    private let stderrReader: PipeReader

    /// Path of the peer script, found relative to this source file.
    static var scriptPath: String {
        URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent()   // TestSupport
            .deletingLastPathComponent()   // SwitchboardTests
            .appendingPathComponent("Peers/ws_echo_server.py").path
    }

    private init(arguments: [String]) async throws {
        guard FileManager.default.fileExists(atPath: Self.scriptPath) else {
            throw Failure(description: "interop peer script missing at \(Self.scriptPath)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-u", Self.scriptPath] + arguments
        let stdin = Pipe(), stdout = Pipe(), stderr = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = stderr
        self.process = process
        self.stdin = stdin
        let output = InteropOutput()
        let errors = InteropOutput()
        self.output = output
        self.errors = errors
        stdoutReader = PipeReader(stdout.fileHandleForReading) { chunk in
            output.state.withLock { state in
                if chunk.isEmpty {
                    state.eof = true
                    if !state.partial.isEmpty {
                        state.pending.append(String(decoding: state.partial, as: UTF8.self))
                        state.partial = Data()
                    }
                    return
                }
                state.partial.append(chunk)
                while let nl = state.partial.firstIndex(of: 10) {
                    let line = state.partial[state.partial.startIndex..<nl]
                    state.pending.append(String(decoding: line, as: UTF8.self))
                    state.partial = Data(state.partial[(nl + 1)...])
                }
            }
        }
        stderrReader = PipeReader(stderr.fileHandleForReading) { chunk in
            if !chunk.isEmpty {
                errors.state.withLock { if $0.partial.count < 1 << 20 { $0.partial.append(chunk) } }
            }
        }
        do {
            try process.run()
        } catch {
            throw Failure(description: "cannot start python3 (/usr/bin/env python3): \(error)")
        }
        // The first stdout line is `PORT <n>`; a missing `websockets` package makes the script
        // exit with a message on stderr instead.
        var portLine: String
        do {
            portLine = try await Self.nextLine(output: output, process: process, timeout: .seconds(60))
        } catch {
            process.terminate()
            let stderrText = errors.state.withLock { String(decoding: $0.partial, as: UTF8.self) }
            throw Failure(description: "interop peer did not start (\(error)); stderr: \(stderrText)")
        }
        guard portLine.hasPrefix("PORT "), let port = Int(portLine.dropFirst(5)), port > 0 else {
            process.terminate()
            throw Failure(description: "interop peer: unexpected first line \(portLine.debugDescription)")
        }
        self.port = port
    }

    private static func nextLine(output: InteropOutput, process: Process,
                                 timeout: Duration) async throws -> String {
        let deadline = ContinuousClock.now + timeout
        while true {
            let (line, eof) = output.state.withLock { state -> (String?, Bool) in
                if !state.pending.isEmpty { return (state.pending.removeFirst(), state.eof) }
                return (nil, state.eof)
            }
            if let line { return line }
            if eof || !process.isRunning {
                // Give the reader a moment to deliver the last bytes.
                try await Task.sleep(for: .milliseconds(50))
                if let line = output.state.withLock({ $0.pending.isEmpty ? nil : $0.pending.removeFirst() }) {
                    return line
                }
                throw Failure(description: "peer stdout ended (exit status \(process.isRunning ? -1 : process.terminationStatus))")
            }
            if ContinuousClock.now >= deadline {
                throw Failure(description: "no stdout line from the peer within \(timeout)")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// The next stdout line of the peer (after the `PORT` line). Timeouts here only end a
    /// failing wait: generous.
    func nextLine(timeout: Duration = .seconds(60)) async throws -> String {
        try await Self.nextLine(output: output, process: process, timeout: timeout)
    }

    /// Skips stdout lines until one starts with `prefix`.
    func line(startingWith prefix: String, timeout: Duration = .seconds(60)) async throws -> String {
        let deadline = ContinuousClock.now + timeout
        while true {
            let remaining = deadline - ContinuousClock.now
            guard remaining > .zero else { throw Failure(description: "no peer line starting with \(prefix)") }
            let line = try await nextLine(timeout: remaining)
            if line.hasPrefix(prefix) { return line }
        }
    }

    var stderrText: String { errors.state.withLock { String(decoding: $0.partial, as: UTF8.self) } }

    func terminate() {
        if process.isRunning { process.terminate() }
        try? stdin.fileHandleForWriting.close()
        process.waitUntilExit()
    }

    /// Runs `body` with a running peer; the peer is terminated afterwards, whatever happens.
    static func with<T>(_ arguments: [String] = [], _ body: (InteropPeer) async throws -> T) async throws -> T {
        let peer = try await InteropPeer(arguments: ["--port", "0"] + arguments)
        defer { peer.terminate() }
        return try await body(peer)
    }
}

/// Lines read from a pipe (stderr keeps everything in `partial`).
final class InteropOutput: Sendable {
    let state = Locked<(pending: [String], partial: Data, eof: Bool)>(([], Data(), false))
}

/// Shorthand for ``InteropPeer/with(_:_:)``.
func withInteropPeer<T>(_ arguments: [String] = [], _ body: (InteropPeer) async throws -> T) async throws -> T {
    try await InteropPeer.with(arguments, body)
}

struct InteropTimeout: Error, CustomStringConvertible {
    var what: String
    var description: String { "timed out: \(what)" }
}

/// Runs `body`, throwing ``InteropTimeout`` if it takes longer than `timeout` (the body is cancelled).
func withInteropTimeout<T: Sendable>(_ timeout: Duration, _ what: String,
                                     _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: timeout)
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else {
            throw InteropTimeout(what: what)
        }
        return value
    }
}

/// Reads `stream` until an element equal to `terminator` (included) or the stream ends.
func collectLines(_ stream: AsyncStream<Data>, until terminator: String,
                  timeout: Duration = .seconds(60)) async throws -> [String] {
    try await withInteropTimeout(timeout, "lines until \(terminator)") {
        var lines: [String] = []
        for await line in stream {
            let text = String(decoding: line, as: UTF8.self)
            lines.append(text)
            if text == terminator { break }
        }
        return lines
    }
}

/// Runs `body` with a TCP port on 127.0.0.1 that nothing listens on: bound by us without
/// `listen` for as long as `body` runs, so connections to it are refused and no other test's
/// server can take it meanwhile (a port bound then closed at once could be handed to one).
func withClosedPort<T>(_ body: (Int) async throws -> T) async throws -> T {
    let fd = socket(AF_INET, SystemConstants.streamSocket, 0)
    guard fd >= 0 else { throw InteropPeer.Failure(description: "socket() failed") }
    defer { close(fd) }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = 0
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    var len = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { p -> Bool in
            bind(fd, p, len) == 0 && getsockname(fd, p, &len) == 0
        }
    }
    guard bound else { throw InteropPeer.Failure(description: "bind() failed") }
    return try await body(Int(UInt16(bigEndian: addr.sin_port)))
}
