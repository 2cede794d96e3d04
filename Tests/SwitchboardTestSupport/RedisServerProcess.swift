#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation

/// A real `redis-server` (Debian's package; `scripts/test` installs it with `ensure_redis`) run
/// as a child process for one test: on 127.0.0.1, on a port of its own, without persistence
/// (`--save "" --appendonly no`), replicas synced without delay (`--repl-diskless-sync-delay 0`),
/// in a temporary folder that also holds its log.
///
/// The server dies with the test process, even when that is killed with SIGKILL: it is started
/// through a small `sh` wrapper that forks a watcher and then `exec`s `redis-server` (so the
/// server keeps the child's pid). The watcher blocks reading a pipe whose only writing end is
/// held by this process; when that end closes (``stop()``, ``kill()``, or the test process
/// exiting in any way, since the kernel closes it) the watcher SIGKILLs the server — but only if
/// it is still the watcher's parent, so a server already stopped (and its pid maybe reused) is
/// never signalled. ``stop()``, ``kill()`` and `deinit` stop the server themselves first.
package final class RedisServerProcess: @unchecked Sendable {
    // Safety: the mutable state (the running child) lives in `running`, behind a lock; the rest
    // is immutable.

    /// PEM files of a TLS listener; the server does not ask clients for certificates.
    package struct TLSFiles: Sendable {
        package var certificate: String
        package var privateKey: String
        package var caCertificate: String

        package init(certificate: String, privateKey: String, caCertificate: String) {
            self.certificate = certificate
            self.privateKey = privateKey
            self.caCertificate = caCertificate
        }
    }

    package struct Failure: Error, CustomStringConvertible {
        package var description: String
        package init(_ description: String) { self.description = description }
    }

    /// The TCP port (the TLS port when `tls` was given; there is then no plain port).
    package let port: Int
    package let password: String?
    package let tls: TLSFiles?
    /// The server's working folder (`--dir`), which holds `redis.log`.
    package let directory: URL
    /// The configuration file given first on the command line (a sentinel's), if any.
    package let configurationFile: String?
    /// Arguments after the usual ones (`--replicaof …`, `--sentinel`).
    package let extraArguments: [String]

    private let running: TestLock<Running?>

    /// How long a start or restart may take before it fails (the suite runs under
    /// ThreadSanitizer on two cores, next to other tests).
    private static let readyTimeout: Duration = .seconds(30)

    /// `redis://127.0.0.1:P`, `redis://:password@127.0.0.1:P`, or `rediss://…` with TLS.
    package var url: String {
        let scheme = tls == nil ? "redis" : "rediss"
        let auth = password.map {
            ":\($0.addingPercentEncoding(withAllowedCharacters: .urlPasswordAllowed) ?? $0)@"
        } ?? ""
        return "\(scheme)://\(auth)127.0.0.1:\(port)"
    }

    /// Everything the server logged so far (level `warning` and up; startup banner included).
    package var log: String { Self.logTail(directory, lines: Int.max) }

    /// Whether the server process is running (false after ``stop()`` or ``kill()``).
    package var isRunning: Bool { running.withLock { $0.map { !hasExited($0.process) } ?? false } }

    /// The server's pid while it runs.
    package var pid: Int32? { running.withLock { $0?.process.processIdentifier } }

    /// Starts a server and waits until it answers `PING`. With `password` it requires `AUTH`;
    /// with `tls` it listens with TLS only. `configurationFile` (an absolute path) comes first
    /// on the command line and `arguments` last: a sentinel is
    /// `RedisServerProcess(configurationFile: "/…/sentinel.conf", arguments: ["--sentinel"])`.
    /// With `clusterBus`, the port is one whose cluster bus port (port + 10000) is free too,
    /// both below the ephemeral range (a Redis Cluster node listens on both; the arguments
    /// enable cluster mode).
    package init(password: String? = nil, tls: TLSFiles? = nil, configurationFile: String? = nil,
                 arguments: [String] = [], clusterBus: Bool = false) async throws {
        let directory = try TestTemporaryDirectory.make(prefix: "switchboard-redis")
        let settings = Settings(password: password, tls: tls, directory: directory,
                                configurationFile: configurationFile, extra: arguments)
        let deadline = ContinuousClock.now + Self.readyTimeout
        var attempt = 0
        var server: (port: Int, started: Running)?
        while server == nil {
            attempt += 1
            let port = try clusterBus ? Self.freeClusterPort() : Self.freePort()
            if let started = try await Self.start(settings, port: port, deadline: deadline) {
                server = (port, started)
            } else if attempt >= 10 {
                // Someone took the port between our probe and redis's bind, again and again.
                throw Failure("redis-server: address already in use on \(attempt) ports in a row; "
                              + "its log: \(Self.logTail(directory, lines: 20))")
            }
        }
        self.port = server!.port
        self.running = TestLock(server!.started)
        self.password = password
        self.tls = tls
        self.directory = directory
        self.configurationFile = configurationFile
        extraArguments = arguments
    }

    /// Stops the server (SIGKILL: nothing is persisted anyway) and waits until it exited. Idempotent.
    package func stop() async {
        guard let current = running.withLock({ state -> Running? in defer { state = nil }; return state }) else { return }
        let process = current.process
        // SIGKILL, not SIGTERM: a child of a test process may inherit a signal mask that blocks
        // SIGTERM, and without persistence a graceful stop loses nothing more.
        if !hasExited(process) { signalProcess(process.processIdentifier, SIGKILL) }
        await waitForExit(process)
        current.release()
    }

    /// Kills the server with SIGKILL (a crash, as far as clients can tell) and waits until it
    /// exited. Idempotent.
    package func kill() async {
        guard let current = running.withLock({ state -> Running? in defer { state = nil }; return state }) else { return }
        if !hasExited(current.process) { signalProcess(current.process.processIdentifier, SIGKILL) }
        await waitForExit(current.process)
        current.release()
    }

    /// Stops the server (if it runs) and starts a new one on the same port, with the same
    /// settings; without persistence, every key is gone. Waits until it answers `PING`.
    package func restart() async throws {
        await stop()
        let settings = Settings(password: password, tls: tls, directory: directory,
                                configurationFile: configurationFile, extra: extraArguments)
        let deadline = ContinuousClock.now + Self.readyTimeout
        while true {
            if let started = try await Self.start(settings, port: port, deadline: deadline) {
                running.withLock { $0 = started }
                return
            }
            // The port is taken (a client's socket bound to it?): it is ours, wait for it.
            guard ContinuousClock.now < deadline else {
                throw Failure("redis-server could not listen on port \(port) again: address already in use; "
                              + "its log: \(Self.logTail(directory, lines: 20))")
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    /// Runs `redis-cli` against this server (authenticated when it has a password) and returns
    /// its standard output without surrounding white space. Error replies come back as text
    /// (`redis-cli` prints them, e.g. `NOAUTH Authentication required.`, and exits 0); throws if
    /// `redis-cli` fails (cannot connect, …). Blocks the calling thread.
    @discardableResult
    package func command(_ arguments: String...) throws -> String {
        try cli(arguments)
    }

    /// Like ``command(_:)``, with `authenticate: false` to leave out the password.
    @discardableResult
    package func cli(_ arguments: [String], authenticate: Bool = true) throws -> String {
        var options = ["-h", "127.0.0.1", "-p", String(port)]
        if tls != nil { options += ["--tls", "--insecure"] }
        if authenticate, let password { options += ["-a", password, "--no-auth-warning"] }
        return try Self.runCLI(options + arguments, directory: directory)
    }

    /// Polls `condition` every 50 ms until it holds (errors count as not yet), at most `timeout`
    /// (a stall guard for a loaded machine, not a figure); a timeout's error ends with
    /// `diagnosis()` when given: what the servers said, so that a failure can be understood.
    package static func poll(_ what: String, timeout: Duration, diagnosis: () -> String = { "" },
                             _ condition: () throws -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        var lastError: Error?
        while ContinuousClock.now < deadline {
            do {
                if try condition() { return }
            } catch {
                lastError = error
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        let details = diagnosis()
        throw Failure("timed out waiting for \(what)\(lastError.map { ": \($0)" } ?? "")"
                      + (details.isEmpty ? "" : "; \(details)"))
    }

    deinit {
        guard let current = running.withLock({ state -> Running? in defer { state = nil }; return state }) else { return }
        // No waiting here: deinit may run on a thread Foundation's exit monitoring needs.
        if !hasExited(current.process) { signalProcess(current.process.processIdentifier, SIGKILL) }
        current.release()
    }

    // MARK: - Starting

    private struct Settings: Sendable {
        var password: String?
        var tls: TLSFiles?
        var directory: URL
        var configurationFile: String?
        var extra: [String]
    }

    /// A started server: `redis-server` (exec'd by the wrapper, same pid) and the pipe whose
    /// writing end keeps the watcher waiting.
    private final class Running: @unchecked Sendable {  // only release() mutates, once, by the owner
        let process: Process
        private let lifeline: Pipe

        init(process: Process, lifeline: Pipe) {
            self.process = process
            self.lifeline = lifeline
        }

        /// Closes the lifeline once the server is gone, so the watcher exits too (without
        /// signalling anything: the server is no longer its parent).
        func release() {
            try? lifeline.fileHandleForWriting.close()
        }
    }

    /// The wrapper: fd 3 is the lifeline (stdin of the wrapper); the watcher reads it until EOF,
    /// then SIGKILLs `$$` (the wrapper's pid, by then `redis-server`'s) if that is still its
    /// parent, read from /proc/self/stat (pid, comm, state, ppid). Then `exec redis-server`.
    private static let wrapper = """
        exec 3<&0 </dev/null
        (
            while read -r _ <&3; do :; done
            read -r _ _ _ ppid _ </proc/self/stat
            [ "$ppid" = "$$" ] && kill -KILL $$
        ) &
        exec 3<&-
        exec redis-server "$@"
        """

    private static func arguments(_ settings: Settings, port: Int) -> [String] {
        var arguments = (settings.configurationFile.map { [$0] } ?? []) + ["--bind", "127.0.0.1", "--daemonize", "no",
                         "--save", "", "--appendonly", "no",
                         "--dir", settings.directory.path,
                         "--logfile", settings.directory.appendingPathComponent("redis.log").path,
                         "--loglevel", "warning",
                         // A replica's first sync starts at once, not after Redis's default 5 s
                         // wait for more replicas: every group and cluster here starts 5 s sooner,
                         // and a failover's re-sync does not sit idle on a loaded machine.
                         "--repl-diskless-sync-delay", "0"]
        if let tls = settings.tls {
            arguments += ["--port", "0", "--tls-port", String(port),
                          "--tls-cert-file", tls.certificate, "--tls-key-file", tls.privateKey,
                          "--tls-ca-cert-file", tls.caCertificate, "--tls-auth-clients", "no"]
        } else {
            arguments += ["--port", String(port)]
        }
        if let password = settings.password { arguments += ["--requirepass", password] }
        return arguments + settings.extra
    }

    /// Launches a server on `port` and waits until it answers; nil if the port was taken.
    private static func start(_ settings: Settings, port: Int, deadline: ContinuousClock.Instant) async throws -> Running? {
        let stderrFile = settings.directory.appendingPathComponent("stderr.log")
        _ = FileManager.default.createFile(atPath: stderrFile.path, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", wrapper, "redis-server-wrapper"] + arguments(settings, port: port)
        process.currentDirectoryURL = settings.directory
        let lifeline = Pipe()
        process.standardInput = lifeline
        process.standardOutput = FileHandle.nullDevice
        let stderrHandle = try FileHandle(forWritingTo: stderrFile)
        defer { try? stderrHandle.close() }
        process.standardError = stderrHandle
        do {
            try process.run()
        } catch {
            throw Failure("cannot start /bin/sh for redis-server: \(error)")
        }
        let started = Running(process: process, lifeline: lifeline)
        func abandon() {
            if !hasExited(process) { signalProcess(process.processIdentifier, SIGKILL) }
            started.release()
        }
        do {
            while true {
                if hasExited(process) {
                    started.release()
                    let log = logTail(settings.directory, lines: 20)
                    if log.contains("Address already in use") { return nil }
                    let stderr = (try? String(contentsOf: stderrFile, encoding: .utf8)) ?? ""
                    let hint = stderr.contains("not found")
                        ? " (is Debian's redis-server installed? scripts/test installs it)" : ""
                    throw Failure("redis-server on port \(port) exited\(hint); "
                                  + "stderr: \(stderr.trimmingCharacters(in: .whitespacesAndNewlines)); its log: \(log)")
                }
                if try answersPing(settings, port: port) { return started }
                guard ContinuousClock.now < deadline else {
                    abandon()
                    throw Failure("redis-server on port \(port) did not answer PING within \(readyTimeout); "
                                  + "its log: \(logTail(settings.directory, lines: 20))")
                }
                try await Task.sleep(for: .milliseconds(50))
            }
        } catch {
            abandon()
            throw error
        }
    }

    /// Whether the server on `port` answers `PING` (`+PONG`, or `-NOAUTH` with a password).
    private static func answersPing(_ settings: Settings, port: Int) throws -> Bool {
        guard let reply = exchange(port: port, request: settings.tls == nil ? Array("*1\r\n$4\r\nPING\r\n".utf8) : nil) else {
            return false
        }
        if settings.tls == nil {
            return reply.hasPrefix("+PONG") || reply.hasPrefix("-NOAUTH")
        }
        // TLS: the port accepts connections; ask redis-cli for the real answer.
        var options = ["-h", "127.0.0.1", "-p", String(port), "--tls", "--insecure"]
        if let password = settings.password { options += ["-a", password, "--no-auth-warning"] }
        let answer = (try? runCLI(options + ["PING"], directory: settings.directory)) ?? ""
        return answer == "PONG"
    }

    /// Connects to 127.0.0.1:`port`; sends `request` and returns the first reply bytes as text
    /// (empty without a request). Nil if the connection or the exchange fails.
    private static func exchange(port: Int, request: [UInt8]?) -> String? {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = loopback(port: port)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { return nil }
        guard let request else { return "" }
        let sent = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard sent == request.count else { return nil }
        var buffer = [UInt8](repeating: 0, count: 256)
        let received = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard received > 0 else { return nil }
        return String(decoding: buffer[0..<received], as: UTF8.self)
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    /// A port free on 127.0.0.1 right now (bind port 0, read it, close). redis-server cannot
    /// report a port it chose itself, so it gets this one; a lost race shows as "Address already
    /// in use" and is retried by the caller.
    private static func freePort() throws -> Int {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw Failure("socket(): errno \(errno)") }
        defer { close(fd) }
        var address = loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0 else { throw Failure("bind(127.0.0.1:0): errno \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { throw Failure("getsockname(): errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// A port in 20000...31999 free on 127.0.0.1 right now, with port + 10000 (a cluster node's
    /// bus port, below 42000) free as well. Chosen at random below the kernel's ephemeral range
    /// (32768 and up), where no client socket takes it meanwhile; a lost race shows as "Address
    /// already in use" and is retried by the caller.
    private static func freeClusterPort() throws -> Int {
        for _ in 0..<200 {
            let port = Int.random(in: 20000...31999)
            if canBind(port), canBind(port + 10000) { return port }
        }
        throw Failure("no free pair of ports (P, P + 10000) in 20000...41999")
    }

    /// Whether 127.0.0.1:`port` can be bound now (bound and closed at once).
    private static func canBind(_ port: Int) -> Bool {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = loopback(port: port)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    // MARK: - redis-cli and the log

    private static func runCLI(_ arguments: [String], directory: URL) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["redis-cli"] + arguments
        let output = Pipe()
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = output
        // stderr to a file of its own, so that neither pipe can fill up while the other is read.
        let errorFile = directory.appendingPathComponent("redis-cli-\(UUID().uuidString).err")
        _ = FileManager.default.createFile(atPath: errorFile.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: errorFile) }
        let errorHandle = try FileHandle(forWritingTo: errorFile)
        defer { try? errorHandle.close() }
        process.standardError = errorHandle
        do {
            try process.run()
        } catch {
            throw Failure("cannot start redis-cli: \(error)")
        }
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let status = process.terminationReason == .exit ? process.terminationStatus : -1
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard status == 0 else {
            let errors = (try? String(contentsOf: errorFile, encoding: .utf8)) ?? ""
            throw Failure("redis-cli \(arguments.joined(separator: " ")) failed (exit status \(status), -1: a signal): "
                          + "\(text) \(errors.trimmingCharacters(in: .whitespacesAndNewlines))")
        }
        return text
    }

    private static func logTail(_ directory: URL, lines: Int) -> String {
        let text = (try? String(contentsOf: directory.appendingPathComponent("redis.log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n", omittingEmptySubsequences: false).suffix(lines).joined(separator: "\n")
    }
}

/// Whether the server's process has exited (``ChildProcess`` collects every exit on a thread
/// of its own; Foundation's `Process` missed some of these, leaving the server a zombie).
private func hasExited(_ process: Process) -> Bool {
    !process.isRunning
}

/// Polls ``hasExited(_:)`` until it is true (at most 30 s: a SIGKILLed process exits at once).
private func waitForExit(_ process: Process) async {
    let deadline = ContinuousClock.now + .seconds(30)
    while !hasExited(process) && ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(10)) }
}

/// `kill(2)`, outside the class whose `kill()` would shadow it.
private func signalProcess(_ pid: Int32, _ signal: Int32) {
    _ = kill(pid, signal)
}
