#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation

/// A real HTTP `CONNECT` proxy nobody here wrote: `proxy.py` (PyPI), one acceptor process,
/// optionally with Basic authentication. It listens on an ephemeral port, which it writes to a
/// port file once listening; its access log (one line per request, e.g.
/// `CONNECT 127.0.0.1:4242`) goes to a file the tests read.
final class ProxyPeer: @unchecked Sendable {  // Process: only stop() mutates, once
    typealias Failure = InteropPeer.Failure

    let port: Int
    private let process: Process
    private let stdin: Pipe
    private let directory: URL

    /// The proxy's URL with `credentials` (`user:password`) if given.
    func url(credentials: String? = nil) -> String {
        "http://\(credentials.map { "\($0)@" } ?? "")127.0.0.1:\(port)"
    }

    /// Everything the proxy logged so far.
    var log: String {
        (try? String(contentsOf: directory.appendingPathComponent("proxy.log"), encoding: .utf8)) ?? ""
    }

    /// Starts the proxy; `basicAuth` is `user:password`.
    init(basicAuth: String? = nil) async throws {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("switchboard-proxy-\(getpid())-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let portFile = directory.appendingPathComponent("port")
        let logFile = directory.appendingPathComponent("proxy.log")
        _ = FileManager.default.createFile(atPath: logFile.path, contents: nil)
        // The wrapper puts the proxy and its acceptor processes in a process group of their own
        // and kills that group when stdin closes, so the proxy dies with the test process (a
        // SIGTERM to itself left proxy.py's acceptor, and proxy.py, running).
        let wrapper = """
            import os, signal, sys, threading, proxy
            os.setpgid(0, 0)
            def watch():
                while os.read(0, 4096): pass
                os.killpg(os.getpgid(0), signal.SIGKILL)
            threading.Thread(target=watch, daemon=True).start()
            sys.argv[0] = "proxy"; proxy.main()
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", wrapper, "--hostname", "127.0.0.1", "--port", "0",
                             "--port-file", portFile.path, "--num-acceptors", "1", "--timeout", "300"]
            + (basicAuth.map { ["--basic-auth", $0] } ?? [])
        // Not the package directory: `-m proxy` must not find anything named proxy there.
        process.currentDirectoryURL = directory
        let stdin = Pipe()
        process.standardInput = stdin
        process.standardOutput = FileHandle.nullDevice
        process.standardError = try FileHandle(forWritingTo: logFile)
        do {
            try process.run()
        } catch {
            throw Failure(description: "cannot start python3 -m proxy: \(error)")
        }
        // Ready once the port file holds the port (written right after listen()).
        var port: Int?
        let deadline = ContinuousClock.now + .seconds(120)
        while port == nil {
            if let text = try? String(contentsOf: portFile, encoding: .utf8),
               let value = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)), value > 0 {
                port = value
                break
            }
            guard process.isRunning, ContinuousClock.now < deadline else {
                process.terminate()
                let log = (try? String(contentsOf: logFile, encoding: .utf8)) ?? ""
                throw Failure(description: "proxy.py did not start (is the PyPI package proxy.py installed? "
                              + "scripts/test installs it); its log: \(log)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        self.port = port ?? 0
        self.process = process
        self.stdin = stdin
        self.directory = directory
    }

    /// Stops the proxy (without waiting for its two-second shutdown) and removes its files.
    func stop() {
        try? stdin.fileHandleForWriting.close()
        if process.isRunning { process.terminate() }
        try? FileManager.default.removeItem(at: directory)
    }

    /// Runs `body` with a running proxy, stopped afterwards whatever happens.
    static func with<T>(basicAuth: String? = nil, _ body: (ProxyPeer) async throws -> T) async throws -> T {
        let proxy = try await ProxyPeer(basicAuth: basicAuth)
        defer { proxy.stop() }
        return try await body(proxy)
    }
}
