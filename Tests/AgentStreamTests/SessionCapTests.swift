import Foundation
import Testing
import SwitchboardChannel
import Switchboard
import SwitchboardTestSupport
import SwitchboardCore
#if canImport(Glibc)
import Glibc
#endif

/// Hostile clients against `agent-stream serve`: sessions beyond the caps, sessions abandoned
/// by the hundred, a resume racing an idle connection.
@Suite("agent-stream: sessions under hostile clients", .serialized)
struct SessionCapTests {
    /// Connection A holds the session and waits (its writer parked); connection B resumes it
    /// with a `last_seq` the session never sent. B takes over and is told `unknown_position`
    /// first; the server lives on (it died of a continuation resumed twice: the takeover woke
    /// A's writer, then the resume failure's event woke it again).
    @Test func aResumeFromAnUnknownPositionWhileTheSessionIsAttachedIsRefusedNotFatal() async throws {
        // Each round opens a new session: no per-client cap (one anonymous client here).
        let server = try await AgentServerProcess(["--max-sessions-per-client", "0"])
        for round in 0..<TestEnvironment.sized(100, tsan: 30) {
            let session = "race-\(round)"
            let first = try await Channel.connect(try server.endpoint(session: session))
            // A is attached once the session answers it.
            try await first.send(.cancel)
            #expect(await readEvents(first) { _ in true } == [.system(message: "no turn is running")])
            var endpoint = try server.endpoint(session: session)
            endpoint.lastSequence = 999
            let events = try await withChannel(endpoint) { second in
                await readEvents(second) { _ in true }
            }
            #expect(events == [.resumeFailed(reason: "unknown_position")], "round \(round)")
            _ = await readEvents(first) { _ in false }   // closed: replaced
            #expect(await first.closeStatus?.reason == "replaced")
            #expect(server.isRunning, "the server died in round \(round): \(server.stderr.suffix(2000))")
            guard server.isRunning else { return }
        }
    }

    /// Beyond `--max-sessions`, with every session attached: 503 with `Retry-After` and
    /// `too_many_sessions`; resuming or taking over a session that exists still works, and the
    /// refusals are counted on `/healthz`.
    @Test func aNewSessionBeyondTheGlobalCapIsRefusedWith503() async throws {
        let server = try await AgentServerProcess(["--max-sessions", "2", "--max-sessions-per-client", "0",
                                                   "--resume-grace", "60"])
        let a = try await Channel.connect(try server.endpoint(session: "a"))
        let b = try await Channel.connect(try server.endpoint(session: "b"))
        defer { Task { await a.close(); await b.close() } }
        let response = try await rawUpgrade(port: server.port, query: "session_id=c")
        #expect(response.hasPrefix("HTTP/1.1 503"), "\(response)")
        #expect(response.contains("\r\nRetry-After: 60\r\n"), "\(response)")
        #expect(response.contains(#""type":"overloaded_error""#), "\(response)")
        #expect(response.contains(#""code":"too_many_sessions""#), "\(response)")
        do {
            _ = try await Channel.connect(try server.endpoint(session: "d"))
            Issue.record("a third session was opened")
        } catch let error as SwitchboardError {
            #expect(error.httpStatus == 503)
        }
        // Taking over "b" is no new session.
        let takeover = try await Channel.connect(try server.endpoint(session: "b"))
        try await takeover.send(.cancel)
        #expect(await readEvents(takeover) { _ in true } == [.system(message: "no turn is running")])
        await takeover.close()
        let stats = try await getJSON(port: server.port, path: "/healthz")
        #expect(stats["sessions"] as? Int == 2, "\(stats)")
        #expect(stats["refused"] as? Int == 2, "\(stats)")
    }

    /// Beyond `--max-sessions-per-client`: 429 for that client only (a client is its token when
    /// tokens are distinct); another client still gets in; the client's own sessions resume.
    @Test func aNewSessionBeyondTheClientsCapIsRefusedWith429() async throws {
        let server = try await AgentServerProcess(["--max-sessions-per-client", "2"])
        var held: [Channel] = []
        for session in ["a1", "a2"] {
            held.append(try await Channel.connect(try server.endpoint(session: session, token: "alice-token")))
        }
        let response = try await rawUpgrade(port: server.port, query: "session_id=a3",
                                            headers: ["Authorization: Bearer alice-token"])
        #expect(response.hasPrefix("HTTP/1.1 429"), "\(response)")
        #expect(response.contains("\r\nRetry-After: "), "\(response)")
        #expect(response.contains(#""type":"rate_limit_error""#), "\(response)")
        #expect(response.contains(#""code":"too_many_sessions""#), "\(response)")
        held.append(try await Channel.connect(try server.endpoint(session: "b1", token: "bob-token")))
        held.append(try await Channel.connect(try server.endpoint(session: "a1", token: "alice-token")))
        for channel in held { await channel.close() }
        #expect(!server.stderr.contains("alice-token"), "the token was logged")
    }

    /// At the global cap, the session detached the longest is evicted (its turn and process
    /// ended) to make room; its client, coming back, is told the session is gone.
    @Test func aDetachedSessionIsEvictedToMakeRoom() async throws {
        let server = try await AgentServerProcess(["--max-sessions", "2", "--max-sessions-per-client", "0",
                                                   "--resume-grace", "600"])
        var old = try server.endpoint(session: "old")
        old.lastSequence = try await withChannel(old) { channel in
            try await channel.send(.cancel)
            _ = await readEvents(channel) { _ in true }
            return channel.lastSequence
        }
        #expect(await server.waitForLog("session old closed"))
        let attached = try await Channel.connect(try server.endpoint(session: "attached"))
        let newer = try await Channel.connect(try server.endpoint(session: "new"))
        #expect(await server.waitForLog("session old evicted"))
        await newer.close()
        await attached.close()
        // "new" is detached now and "old" gone: "old" comes back as a new session, evicting "new".
        let events = try await withChannel(old) { channel in await readEvents(channel) { _ in true } }
        #expect(events == [.resumeFailed(reason: "session_not_found")])
    }

    /// A session abandoned mid-turn with `--resume-grace 1`: its agent process is gone within
    /// the grace period plus about a second.
    @Test func anAbandonedSessionsAgentProcessEndsAfterTheGracePeriod() async throws {
        let server = try await AgentServerProcess(["--agent-command", "sleep 30", "--resume-grace", "1"])
        try await withChannel(try server.endpoint(session: "abandoned")) { channel in
            try await channel.send(.message(content: "work"))
            #expect(await waitUntil { agentProcesses(of: server.pid).count == 1 })
        }
        // The grace period starts when the server sees the connection gone (its log says so),
        // not when the client's close returns: under ThreadSanitizer that close handshake can
        // take longer than the grace itself (0.01 s measured from it once).
        #expect(await server.waitForLog("session abandoned detached"))
        let left = ContinuousClock.now
        #expect(await waitUntil { agentProcesses(of: server.pid).isEmpty })
        let elapsed = ContinuousClock.now - left
        print("abandoned session's agent process gone after \(String(format: "%.2f", milliseconds(elapsed))) ms (grace 1 s)")
        // After the 1 s grace, not before; and well before the default grace (30 s) would end it.
        // The upper bound is loose on purpose: a loaded machine (the whole suite in parallel)
        // delays the reaping by seconds (3.2 s seen against a former 3 s bound).
        #expect(elapsed >= .milliseconds(500), "gone after \(elapsed), before the grace period")
        #expect(elapsed < .seconds(20), "gone after \(elapsed)")
    }

    /// The server stopped (SIGTERM) while a turn runs: its agent process does not outlive it
    /// (it did: an agent stayed running, orphaned, until it ended on its own).
    @Test func noAgentProcessOutlivesTheServer() async throws {
        let server = try await AgentServerProcess(["--agent-command", "sleep 180"])
        var agents: [Int32] = []
        let channel = try await Channel.connect(try server.endpoint(session: "running"))
        try await channel.send(.message(content: "work"))
        #expect(await waitUntil { agents = agentProcesses(of: server.pid); return agents.count == 1 })
        server.stop()
        #expect(await waitUntil { !server.isRunning })
        // A failure bound only: with the fix the agent is gone before the server exits.
        #expect(await waitUntil(timeout: .seconds(10)) { agents.allSatisfy { !isLiveProcess($0) } },
                "agent processes \(agents.filter(isLiveProcess)) outlived the server")
        for pid in agents where isLiveProcess(pid) { kill(pid, SIGKILL) }
        await channel.close()
    }

    /// A client looping "new session, one prompt, disconnect", 16 at a time, with an agent
    /// command: the server keeps running, and after every batch its agent processes come back
    /// within the cap (evicted sessions' processes are killed asynchronously: the peak seen
    /// between is printed, not asserted).
    @Test func hundredsOfAbandonedSessionsKeepAtMostTheCapOfAgentProcesses() async throws {
        let cap = 32, total = TestEnvironment.sized(400, tsan: 120), concurrency = 16
        let server = try await AgentServerProcess(["--agent-command", "sleep 20", "--max-sessions", "\(cap)",
                                                   "--max-sessions-per-client", "0"])
        var most = 0
        var opened = 0
        while opened < total {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in opened..<min(total, opened + concurrency) {
                    group.addTask {
                        try await withChannel(try server.endpoint(session: "abandoned-\(i)")) { channel in
                            try await channel.send(.message(content: "work"))
                        }
                    }
                }
                try await group.waitForAll()
            }
            opened = min(total, opened + concurrency)
            most = max(most, agentProcesses(of: server.pid).count)
            #expect(server.isRunning, "the server died after \(opened) sessions: \(server.stderr.suffix(2000))")
            guard server.isRunning else { return }
            let settled = await waitUntil { agentProcesses(of: server.pid).count <= cap }
            #expect(settled, "more than \(cap) agent processes after \(opened) sessions")
            guard settled else { return }
        }
        let stats = try await getJSON(port: server.port, path: "/healthz")
        #expect((stats["sessions"] as? Int ?? .max) <= cap, "\(stats)")
        print("\(total) abandoned sessions, cap \(cap): at most \(most) agent processes seen; \(stats)")
    }

    /// Prompts larger than a pipe holds, to agents that never read their stdin: the writes wait
    /// without holding a thread, so the server still answers everyone else (a blocking write
    /// held a cooperative thread per such turn: with as many turns as threads, nothing ran).
    @Test func anAgentThatDoesNotReadItsPromptBlocksNothing() async throws {
        // Agents that outlive the set-up and the wait below: with `sleep 30`, a slow set-up
        // (ThreadSanitizer, the suite's busiest minute) saw the first ones exit before the
        // sixteenth started, and the count never reached 16.
        let server = try await AgentServerProcess(["--agent-command", "sleep 180", "--max-sessions-per-client", "0"])
        let prompt = String(repeating: "p", count: 300_000)   // a pipe holds 64 KiB
        var stuck: [Channel] = []
        for i in 0..<16 {
            let channel = try await Channel.connect(try server.endpoint(session: "stuck-\(i)"))
            try await channel.send(.message(content: prompt))
            stuck.append(channel)
        }
        #expect(await waitUntil { agentProcesses(of: server.pid).count == 16 })
        let answer = try await withChannel(try server.endpoint(session: "other")) { channel in
            try await channel.send(.cancel)
            return await readEvents(channel, timeout: .seconds(30)) { _ in true }
        }
        #expect(answer == [.system(message: "no turn is running")])
        for channel in stuck { await channel.close() }
    }

    /// A client's sessions share a message rate (5× the session's): new sessions do not buy
    /// new messages.
    @Test func aClientsSessionsShareItsMessageRate() async throws {
        // One token per 1000 s, burst 1 a session, so burst 5 per client.
        let server = try await AgentServerProcess(["--rate", "0.001", "--burst", "1", "--word-delay-ms", "0"])
        var limited = 0
        for i in 0..<7 {
            let events = try await withChannel(try server.endpoint(session: "rate-\(i)", token: "carol")) { channel in
                try await channel.send(.message(content: "m"))
                try await channel.send(.cancel)
                return await readEvents(channel) { e in
                    if case .rateLimited = e { return true }
                    return e.resultSubtype == .cancelled || e == .system(message: "no turn is running")
                }
            }
            if events.contains(where: { if case .rateLimited = $0 { true } else { false } }) { limited += 1 }
        }
        #expect(limited == 2, "\(limited) of 7 sessions were limited")
    }
}

/// Polls `condition` (20 ms) until it holds; false after `timeout`, a failure guard only.
func waitUntil(timeout: Duration = .seconds(60), _ condition: () async -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if await condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return await condition()
}

/// Whether `pid` is a process that has not exited (a zombie has), from /proc.
func isLiveProcess(_ pid: Int32) -> Bool {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = stat.lastIndex(of: ")") else { return false }
    let state = stat[stat.index(after: close)...].split(separator: " ").first
    return state != "Z" && state != "X"
}

/// The live (not zombie) child processes of `parent`, from /proc.
func agentProcesses(of parent: Int32) -> [Int32] {
    guard let names = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
    return names.compactMap { name -> Int32? in
        guard let pid = Int32(name),
              let stat = try? String(contentsOfFile: "/proc/\(name)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        // After "pid (comm) ": state, ppid.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 1, fields[0] != "Z", Int32(fields[1]) == parent else { return nil }
        return pid
    }
}

enum TestEnvironment {
    /// True under ThreadSanitizer (`__tsan_init` is exported by its runtime).
    static let isThreadSanitized: Bool = {
        guard let main = dlopen(nil, RTLD_NOW) else { return false }
        return dlsym(main, "__tsan_init") != nil
    }()

    /// `normal`, or `tsan` under ThreadSanitizer.
    static func sized<T>(_ normal: T, tsan: T) -> T { isThreadSanitized ? tsan : normal }

    /// A token lifetime: `normal`, or `tsan` under ThreadSanitizer, stretched by the machine's
    /// load (``MachineLoad``) so that the round trips it must cover keep their share of it.
    static func lifetime(_ normal: Duration, tsan: Duration) -> Duration { sized(normal, tsan: tsan) * MachineLoad.factor }
}
