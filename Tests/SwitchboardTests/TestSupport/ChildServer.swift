#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation

/// An example server (`echo-server`, …) run as a child process, so that its memory can be
/// measured apart from the other suites running in this process. The child is killed (SIGKILL)
/// by ``stop()`` or, at the latest, when this object goes away.
final class ChildServer: @unchecked Sendable {
    // Safety: `process` is only used for isRunning/waitUntilExit, which Foundation synchronizes.
    private let process: Process
    let port: Int
    let pid: Int32

    private init(process: Process, port: Int) {
        self.process = process
        self.port = port
        self.pid = process.processIdentifier
    }

    /// Launches the example binary `name` (built next to the test bundle) with `arguments`, which
    /// must make it print its port at the end of its first stdout line, as `--port 0` does.
    static func start(_ name: String, _ arguments: [String]) async throws -> ChildServer {
        let (process, out) = try ExamplesTests.launch(try ExamplesTests.binary(name), arguments)
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
            return ChildServer(process: process, port: port)
        } catch {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
            throw error
        }
    }

    var isRunning: Bool { process.isRunning }

    /// The child's resident set size in bytes (VmRSS), or nil once it is gone.
    func residentBytes() -> Int? { Self.residentBytes(pid: pid) }

    static func residentBytes(pid: Int32) -> Int? {
        // procfs files report size 0: read to EOF with plain read(2).
        let fd = open("/proc/\(pid)/status", O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            bytes += chunk[0..<n]
        }
        let status = String(decoding: bytes, as: UTF8.self)
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
