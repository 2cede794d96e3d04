import CSpawnShims
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A child process started with `posix_spawn`: the part of Foundation's `Process` that the
/// examples and the tests use, with the same names, so that a file's
/// `typealias Process = ChildProcess` switches a module over.
///
/// Why not `Process`: on Linux its `run()` scans `/proc/self/fd` and copies a fixed 256 bytes
/// of each directory entry's name, reading past the end of the directory buffer
/// (swift-corelibs-foundation#5472, unfixed in Swift 6.3). When that buffer ends at an unmapped
/// page the whole process dies with SIGSEGV in `memmove`: a test process that starts hundreds of
/// peers did in CI, and the agent-stream server, which starts a process for every turn a client
/// asks for, could. Here the child closes every descriptor above 2 with one spawn action
/// (`posix_spawn_file_actions_addclosefrom_np`; on macOS `POSIX_SPAWN_CLOEXEC_DEFAULT`).
///
/// Also unlike `Process`: the child starts with no signal blocked and every signal at its
/// default action, whichever thread starts it (the cooperative pool's threads block nearly all
/// signals, and a child inherits its parent thread's mask: started from one of them, a child
/// ignored SIGTERM). Its exit is collected by a thread of its own that waits for it, so
/// ``isRunning``, ``waitUntilExit()`` and ``terminationHandler`` never miss it.
///
/// Set the configuration (``executableURL`` … ``standardError``, ``terminationHandler``) before
/// ``run()``, from one thread; the rest may be used from any thread.
package final class ChildProcess: @unchecked Sendable {
    // Safety: the configuration is written before `run()` only (documented above); everything
    // that changes afterwards is behind `state`'s condition.

    /// How the process ended.
    package enum TerminationReason: Sendable { case exit, uncaughtSignal }

    package var executableURL: URL?
    package var arguments: [String]?
    /// The child's environment; nil: this process's.
    package var environment: [String: String]?
    package var currentDirectoryURL: URL?
    /// A `Pipe` (the child gets its reading end for stdin, its writing end for output; the
    /// parent's copy of the child's end is closed once it runs, as `Process` does), a
    /// `FileHandle`, or nil (inherited).
    package var standardInput: Any?
    package var standardOutput: Any?
    package var standardError: Any?
    /// Called once, on the thread that collected the exit.
    package var terminationHandler: (@Sendable (ChildProcess) -> Void)?
    /// Starts the child as the leader of a process group of its own, so that
    /// ``signalProcessGroup(_:)`` also reaches the processes it starts (a shell's commands).
    package var startsProcessGroup = false

    private struct State {
        var pid: pid_t = 0
        /// The raw `waitpid` status, once collected.
        var status: Int32?
    }

    private let condition = NSCondition()
    private var state = State()

    package init() {}

    /// The child's process ID (0 before ``run()``).
    package var processIdentifier: Int32 { locked { $0.pid } }

    /// Started and not yet exited.
    package var isRunning: Bool { locked { $0.pid != 0 && $0.status == nil } }

    /// The exit status, or the signal that ended it (see ``terminationReason``); -1 while it
    /// runs (where `Process` would trap).
    package var terminationStatus: Int32 {
        guard let status = locked({ $0.status }) else { return -1 }
        return Self.exited(status) ? (status >> 8) & 0xff : status & 0x7f
    }

    package var terminationReason: TerminationReason {
        guard let status = locked({ $0.status }) else { return .exit }
        return Self.exited(status) ? .exit : .uncaughtSignal
    }

    /// Starts the process; throws what `posix_spawn` refused (ENOENT, EMFILE…) as a `POSIXError`.
    package func run() throws {
        guard let executable = executableURL?.path else { throw POSIXError(.ENOENT) }
        guard locked({ $0.pid }) == 0 else { throw POSIXError(.EBUSY) }

        var actions = posix_spawn_file_actions_t()
        try check(posix_spawn_file_actions_init(&actions))
        defer { posix_spawn_file_actions_destroy(&actions) }
        var attributes = posix_spawnattr_t()
        try check(posix_spawnattr_init(&attributes))
        defer { posix_spawnattr_destroy(&attributes) }

        for (target, value, reads) in [(Int32(0), standardInput, true), (1, standardOutput, false), (2, standardError, false)] {
            switch Self.source(of: value, childReads: reads) {
            case .inherited:
                continue
            case .descriptor(let fd):
                try check(posix_spawn_file_actions_adddup2(&actions, fd, target))
            case .nullDevice:
                try check(posix_spawn_file_actions_addopen(&actions, target, "/dev/null", O_RDWR, 0))
            }
        }
        #if os(Linux)
        try check(cspawn_add_closefrom(&actions, 3))
        let flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF
        #else
        let flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_CLOEXEC_DEFAULT
        #endif
        if let directory = currentDirectoryURL?.path {
            try check(cspawn_add_chdir(&actions, directory))
        }
        var none = sigset_t()
        sigemptyset(&none)
        try check(posix_spawnattr_setsigmask(&attributes, &none))
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in Int32(1)..<32 where signal != SIGKILL && signal != SIGSTOP { sigaddset(&defaults, signal) }
        try check(posix_spawnattr_setsigdefault(&attributes, &defaults))
        if startsProcessGroup { try check(posix_spawnattr_setpgroup(&attributes, 0)) }
        let groupFlag = startsProcessGroup ? POSIX_SPAWN_SETPGROUP : 0
        try check(posix_spawnattr_setflags(&attributes, Int16(flags | groupFlag)))

        let argv = ([executable] + (arguments ?? [])).map { strdup($0) } + [nil]
        defer { for arg in argv { free(arg) } }
        var pid: pid_t = 0
        let spawned: Int32
        #if os(Linux)
        let inherited: [String: String]? = nil
        #else
        let inherited: [String: String]? = ProcessInfo.processInfo.environment   // no `environ` in Swift there
        #endif
        if let environment = environment ?? inherited {
            let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
            defer { for entry in envp { free(entry) } }
            spawned = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        } else {
            #if os(Linux)
            spawned = posix_spawn(&pid, executable, &actions, &attributes, argv, environ)
            #else
            spawned = ENOSYS
            #endif
        }
        try check(spawned)

        // The child has its own copies: the parent's ends the child uses are closed here, so
        // that the parent's reads see end of file when the child exits.
        if let pipe = standardInput as? Pipe { try? pipe.fileHandleForReading.close() }
        if let pipe = standardOutput as? Pipe { try? pipe.fileHandleForWriting.close() }
        if let pipe = standardError as? Pipe { try? pipe.fileHandleForWriting.close() }

        let child = pid
        locked { $0.pid = child }
        let reaper = Thread { [self] in collectExit(of: child) }
        reaper.name = "child \(child)"
        reaper.stackSize = 256 << 10
        reaper.start()
    }

    /// Blocks until the process has exited (at once if it has, or was never started).
    package func waitUntilExit() {
        condition.lock()
        defer { condition.unlock() }
        while state.pid != 0 && state.status == nil { condition.wait() }
    }

    /// SIGTERM, if it still runs.
    package func terminate() { signal(SIGTERM) }

    /// SIGINT, if it still runs.
    package func interrupt() { signal(SIGINT) }

    /// Sends `number` to the child's process group (``startsProcessGroup``): the child and what
    /// it started that is still in the group, even after the child itself has exited. Call it
    /// only while something of the group may still run: a group whose members have all gone
    /// frees its number, for reuse once process IDs wrap around.
    package func signalProcessGroup(_ number: Int32) {
        locked { state in
            if startsProcessGroup && state.pid != 0 { _ = kill(-state.pid, number) }
        }
    }

    private func signal(_ number: Int32) {
        // Under the lock: the exit is recorded under it too, so the ID cannot have been
        // collected (and reused by another process) in between.
        locked { state in
            if state.pid != 0 && state.status == nil { _ = kill(state.pid, number) }
        }
    }

    private func collectExit(of pid: pid_t) {
        var status: Int32 = 0
        while true {
            let r = waitpid(pid, &status, 0)
            if r == pid { break }
            if r < 0 && errno == EINTR { continue }
            // Collected by someone else (ECHILD): its status is lost; recorded as signalled.
            status = 0x7f & SIGKILL
            break
        }
        let finalStatus = status
        condition.lock()
        state.status = finalStatus
        condition.broadcast()
        condition.unlock()
        terminationHandler?(self)
    }

    private func locked<R>(_ body: (inout State) -> R) -> R {
        condition.lock()
        defer { condition.unlock() }
        return body(&state)
    }

    private static func exited(_ status: Int32) -> Bool { status & 0x7f == 0 }

    private enum Source { case inherited, descriptor(Int32), nullDevice }

    private static func source(of value: Any?, childReads: Bool) -> Source {
        if let pipe = value as? Pipe {
            return .descriptor(childReads ? pipe.fileHandleForReading.fileDescriptor : pipe.fileHandleForWriting.fileDescriptor)
        }
        if let handle = value as? FileHandle {
            // Foundation's null device handle has no descriptor of its own (-1).
            return handle === FileHandle.nullDevice || handle.fileDescriptor < 0 ? .nullDevice : .descriptor(handle.fileDescriptor)
        }
        return .inherited
    }

    private func check(_ result: Int32) throws {
        if result != 0 { throw POSIXError(POSIXErrorCode(rawValue: result) ?? .EINVAL) }
    }
}
