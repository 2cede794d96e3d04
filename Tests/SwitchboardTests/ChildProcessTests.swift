import Foundation
import SpawnSupport
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// ``ChildProcess``: every process the examples and the tests start (Foundation's `Process`
/// launch reads past a buffer on Linux and crashed the test process in CI:
/// swift-corelibs-foundation#5472, reported by AddressSanitizer as a heap-buffer-overflow in
/// `findMaximumOpenFromProcSelfFD` under `Process.run`).
@Suite struct ChildProcessTests {
    @Test func exitStatusesAndSignalsAreReported() throws {
        let exits = ChildProcess()
        exits.executableURL = URL(fileURLWithPath: "/bin/sh")
        exits.arguments = ["-c", "exit 3"]
        #expect(!exits.isRunning)
        try exits.run()
        exits.waitUntilExit()
        #expect(!exits.isRunning)
        #expect(exits.terminationReason == .exit)
        #expect(exits.terminationStatus == 3)

        let killed = ChildProcess()
        killed.executableURL = URL(fileURLWithPath: "/bin/sh")
        killed.arguments = ["-c", "kill -KILL $$"]
        try killed.run()
        killed.waitUntilExit()
        #expect(killed.terminationReason == .uncaughtSignal)
        #expect(killed.terminationStatus == SIGKILL)
    }

    @Test func aMissingExecutableIsAnErrorNotAProcess() {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/nonexistent/switchboard-no-such-program")
        #expect(throws: POSIXError.self) { try process.run() }
        #expect(!process.isRunning)
        #expect(process.processIdentifier == 0)
    }

    @Test func pipesCarryBothWaysAndEndWhenTheChildExits() throws {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/bin/cat")
        let input = Pipe(), output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        input.fileHandleForWriting.write(Data("hello\n".utf8))
        try input.fileHandleForWriting.close()
        // End of file comes only if the parent's copy of the child's end was closed.
        let data = try output.fileHandleForReading.readToEnd() ?? Data()
        process.waitUntilExit()
        #expect(String(decoding: data, as: UTF8.self) == "hello\n")
        #expect(process.terminationStatus == 0)
    }

    @Test func environmentDirectoryAndNullDeviceAreTheChildsOwn() throws {
        let directory = FileManager.default.temporaryDirectory.resolvingSymlinksInPath()
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "pwd; echo \"$SWITCHBOARD_CHILD\"; cat; echo end"]
        process.environment = ["SWITCHBOARD_CHILD": "value 1", "PATH": "/usr/bin:/bin"]
        process.currentDirectoryURL = directory
        process.standardInput = FileHandle.nullDevice
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let text = String(decoding: try output.fileHandleForReading.readToEnd() ?? Data(), as: UTF8.self)
        process.waitUntilExit()
        #expect(text == "\(directory.path)\nvalue 1\nend\n")
    }

    /// Started from the cooperative pool, whose threads block nearly every signal: the child
    /// must still start with none blocked and none ignored, and hold none of this process's
    /// descriptors (Foundation's `Process` passes its thread's blocked signals on).
    @Test func theChildInheritsNoBlockedSignalAndNoDescriptor() async throws {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)   // without close-on-exec
        defer { close(fds[0]); close(fds[1]) }
        var info = stat()
        #expect(fstat(fds[0], &info) == 0)
        let marker = "pipe:[\(info.st_ino)]"
        // The programs read their own state (a shell would show its own mask, which it changes
        // while it waits for a command).
        let text = try output(of: "/bin/grep", ["-E", "^Sig(Blk|Ign)", "/proc/self/status"])
            + output(of: "/bin/ls", ["-l", "/proc/self/fd"])
        #expect(text.contains("SigBlk:\t0000000000000000"), "\(text)")
        // Signals 1-31 (32 and 33 are the C library's own, out of a program's reach).
        let ignored = text.split(separator: "\n").first { $0.hasPrefix("SigIgn:") }
            .flatMap { UInt64($0.dropFirst("SigIgn:".count).trimmingCharacters(in: .whitespaces), radix: 16) }
        #expect(ignored.map { $0 & 0x7fff_ffff } == 0, "\(text)")
        #expect(!text.contains(marker), "\(text)")
    }

    private func output(of program: String, _ arguments: [String]) throws -> String {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let text = String(decoding: try output.fileHandleForReading.readToEnd() ?? Data(), as: UTF8.self)
        process.waitUntilExit()
        return text
    }

    @Test func terminateEndsItWithSIGTERMAndTheHandlerRunsOnce() async throws {
        let calls = Mutex(0)
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/bin/sleep")
        process.arguments = ["30"]
        process.terminationHandler = { _ in calls.withLock { $0 += 1 } }
        try process.run()
        #expect(process.isRunning)
        #expect(process.processIdentifier > 0)
        process.terminate()
        process.waitUntilExit()
        #expect(process.terminationReason == .uncaughtSignal)
        #expect(process.terminationStatus == SIGTERM)
        while calls.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(1)) }
        process.terminate()   // after the exit: nothing to signal
        #expect(calls.withLock { $0 } == 1)
    }

    /// The examples name ``ChildProcess``; the test modules shadow `Process` with it (their
    /// `ChildProcessAlias.swift`), so that no code here can start a process through Foundation's.
    @Test func noExampleOrTestModuleStartsFoundationsProcess() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        var offenders: [String] = []
        for folder in ["Examples", "Sources"] {
            let base = root.appendingPathComponent(folder)
            guard let files = FileManager.default.enumerator(atPath: base.path) else { continue }
            for case let file as String in files where file.hasSuffix(".swift") {
                let text = try String(contentsOf: base.appendingPathComponent(file), encoding: .utf8)
                if text.range(of: #"(?<![A-Za-z])Process\(\)"#, options: .regularExpression) != nil { offenders.append("\(folder)/\(file)") }
            }
        }
        #expect(offenders.isEmpty, "Foundation's Process started in: \(offenders)")
        for module in ["SwitchboardTestSupport", "SwitchboardTests", "AgentStreamTests", "ChatRoomTests", "SwitchboardRedisTests"] {
            let alias = root.appendingPathComponent("Tests/\(module)/ChildProcessAlias.swift")
            let text = (try? String(contentsOf: alias, encoding: .utf8)) ?? ""
            #expect(text.contains("typealias Process = SpawnSupport.ChildProcess"), "\(module) has no Process alias")
        }
    }
}
