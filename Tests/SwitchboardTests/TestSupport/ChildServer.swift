#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
@testable import Switchboard

/// An example server (`echo-server`, …) run as a child process, so that its memory can be
/// measured apart from the other suites running in this process. The child is killed (SIGKILL)
/// by ``stop()`` or, at the latest, when this object goes away.
final class ChildServer: @unchecked Sendable {
    // Safety: `process` is only used for isRunning/waitUntilExit, which Foundation synchronizes.
    private let process: Process
    let port: Int
    let pid: Int32
    /// What the child wrote to stderr (its log), the last 64 KiB of it.
    private let errors: Locked<[UInt8]>

    private init(process: Process, port: Int, errors: Locked<[UInt8]>) {
        self.process = process
        self.port = port
        self.pid = process.processIdentifier
        self.errors = errors
    }

    /// Launches the example binary `name` (built next to the test bundle) with `arguments`, which
    /// must make it print its port at the end of its first stdout line, as `--port 0` does.
    /// `descriptorLimit` starts it under that `RLIMIT_NOFILE` (through `/bin/sh -c 'ulimit -n …'`:
    /// the limit is process-wide, so it must never be lowered in the test process itself).
    static func start(_ name: String, _ arguments: [String], descriptorLimit: Int? = nil) async throws -> ChildServer {
        let binary = try ExamplesTests.binary(name)
        let process = Process()
        if let descriptorLimit {
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", "ulimit -n \(descriptorLimit) && exec \"$0\" \"$@\"", binary.path] + arguments
        } else {
            process.executableURL = binary
            process.arguments = arguments
        }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let errors = Locked<[UInt8]>([])
        let errorReader = err.fileHandleForReading
        let errorDrain = Thread {
            while true {
                let chunk = errorReader.availableData
                if chunk.isEmpty { return }
                errors.withLock { kept in
                    kept += chunk
                    if kept.count > 64 << 10 { kept.removeFirst(kept.count - (64 << 10)) }
                }
            }
        }
        errorDrain.start()
        do {
            let reader = out.fileHandleForReading
            let firstLine = try await onServerTestThread { () -> String in
                var data = Data()
                while !data.contains(10) {
                    let chunk = reader.availableData
                    if chunk.isEmpty { break }                 // EOF: the child exited
                    data += chunk
                }
                return String(decoding: data.prefix { $0 != 10 }, as: UTF8.self)
            }
            guard let port = firstLine.split(separator: ":").last.flatMap({ Int($0.trimmingCharacters(in: .whitespaces)) }) else {
                throw ServerRawSocket.Failure("\(name) \(arguments): no port in its first line: \"\(firstLine)\"")
            }
            // Keep draining stdout so that the child can never block on a full pipe; ends at EOF.
            let drain = Thread { while !reader.availableData.isEmpty {} }
            drain.start()
            return ChildServer(process: process, port: port, errors: errors)
        } catch {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
            throw error
        }
    }

    var isRunning: Bool { process.isRunning }

    /// What the child has written to stderr so far (its log lines; the last 64 KiB).
    var standardError: String { String(decoding: errors.withLock { $0 }, as: UTF8.self) }

    /// The child's CPU time so far, user and system (`/proc/PID/stat` utime + stime), or nil
    /// once it is gone.
    func cpuTime() -> Duration? {
        guard let stat = Self.procText("/proc/\(pid)/stat"),
              let close = stat.lastIndex(of: ")") else { return nil }
        // After the command name (which may hold spaces) come the fields from the 3rd on:
        // utime and stime are the 14th and 15th.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else { return nil }
        let ticks = max(sysconf(Int32(_SC_CLK_TCK)), 1)
        return .milliseconds((user + system) * 1000 / ticks)
    }

    /// How many descriptors the child has open now (entries of `/proc/PID/fd`), or nil once
    /// it is gone.
    func openDescriptors() -> Int? {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd"))?.count
    }

    /// A procfs file's text (procfs files report size 0: read to EOF with plain read(2)).
    private static func procText(_ path: String) -> String? {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            bytes += chunk[0..<n]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The child's resident set size in bytes (VmRSS), or nil once it is gone.
    func residentBytes() -> Int? { Self.residentBytes(pid: pid) }

    static func residentBytes(pid: Int32) -> Int? {
        guard let status = procText("/proc/\(pid)/status") else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            guard let kib = line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap({ Int($0) })
            else { return nil }
            return kib * 1024
        }
        return nil                                               // a zombie has no VmRSS
    }

    /// Kills the child (SIGKILL) and reaps it. Idempotent.
    func stop() {
        if process.isRunning { kill(pid, SIGKILL) }
        process.waitUntilExit()
    }

    deinit { stop() }
}
