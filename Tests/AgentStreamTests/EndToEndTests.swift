import Foundation
import Synchronization
import Testing
import SwitchboardChannel
import Switchboard
import SwitchboardTestSupport
import SwitchboardCore
#if canImport(Glibc)
import Glibc
#endif

/// Runs the built `agent-stream serve` and talks to it with `withChannel`.
@Suite("agent-stream end to end", .serialized)
struct EndToEndTests {
    /// Answers every permission request (whose tool use id `answering` accepts) with
    /// `decision`; stops at the result.
    private func runTurn(_ channel: Channel, prompt: String, decision: PermissionDecision,
                         answering: @escaping (String) -> Bool = { _ in true },
                         endsWith isEnd: @escaping (ChannelEvent) -> Bool = isResult) async throws -> [ChannelEvent] {
        try await channel.send(.message(content: prompt))
        var all: [ChannelEvent] = []
        while true {
            let chunk = await readEvents(channel) { e in
                if case .permissionRequest(let id, _, _) = e, answering(id) { return true }
                return isEnd(e)
            }
            all += chunk
            guard let last = chunk.last else { return all }
            if case .permissionRequest(let id, _, _) = last, answering(id) {
                try await channel.send(.permission(toolUseId: id, decision: decision))
                continue
            }
            return all
        }
    }

    @Test func fullTurnWithPermissionAllowed() async throws {
        let server = try await AgentServerProcess()
        let events = try await withChannel(try server.endpoint()) { channel in
            try await runTurn(channel, prompt: "hello agent", decision: .allowOnce)
        }
        #expect(collapsedTypes(events) == ["partial", "tool_use", "permission_request", "tool_progress",
                                          "tool_result", "partial", "assistant", "response", "result"])
        let text = try #require(assistantText(events))
        #expect(text.hasPrefix("You asked: hello agent."))
        #expect(partialText(events) == text)
        #expect(events.contains(.toolResult(id: "toolu_1_1", content: "README.md\nPackage.swift\nSources/", isError: false)))
        #expect(events.contains { if case .response(let c, let n) = $0 { c == text && n > 0 } else { false } })
        guard case .result(let turns, let ms, let cost, .success)? = events.last else {
            Issue.record("no success result: \(events)")
            return
        }
        #expect(turns == 1 && ms > 0 && cost > 0)
    }

    @Test func deniedPermissionGivesAnErrorToolResult() async throws {
        let server = try await AgentServerProcess()
        let events = try await withChannel(try server.endpoint()) { channel in
            try await runTurn(channel, prompt: "delete nothing", decision: .deny)
        }
        #expect(collapsedTypes(events) == ["partial", "tool_use", "permission_request", "tool_result",
                                          "partial", "assistant", "response", "result"])
        #expect(events.contains(.toolResult(id: "toolu_1_1", content: "permission denied", isError: true)))
        #expect(assistantText(events)?.contains("permission was denied") == true)
        #expect(events.last?.resultSubtype == .success)
    }

    @Test func alwaysAllowIsRememberedForTheSession() async throws {
        let server = try await AgentServerProcess()
        try await withChannel(try server.endpoint()) { channel in
            let first = try await runTurn(channel, prompt: "one", decision: .alwaysAllow)
            #expect(first.contains { if case .permissionRequest = $0 { true } else { false } })
            let second = try await runTurn(channel, prompt: "two", decision: .deny)
            #expect(!second.contains { if case .permissionRequest = $0 { true } else { false } })
            #expect(second.contains(.toolResult(id: "toolu_2_1", content: "README.md\nPackage.swift\nSources/", isError: false)))
            guard case .result(2, _, _, .success)? = second.last else {
                Issue.record("second turn: \(second)")
                return
            }
        }
    }

    @Test func cancelStopsTheTurnMidStream() async throws {
        let server = try await AgentServerProcess()
        try await withChannel(try server.endpoint()) { channel in
            try await channel.send(.message(content: "a long answer please"))
            let before = await readEvents(channel) { if case .partial = $0 { true } else { false } }
            #expect(before.last?.type == "partial")
            let sent = ContinuousClock.now
            try await channel.send(.cancel)
            let after = await readEvents(channel, until: isResult)
            let latency = ContinuousClock.now - sent
            print("cancel → cancelled result latency: \(String(format: "%.2f", milliseconds(latency))) ms")
            #expect(after.last?.resultSubtype == .cancelled)
            // Nothing of the cancelled turn may follow: wait longer than several word delays,
            // then probe with a second cancel, whose answer must be the very next event.
            try await Task.sleep(for: .milliseconds(300))
            try await channel.send(.cancel)
            let tail = await readEvents(channel) { if case .system = $0 { true } else { false } }
            #expect(tail == [.system(message: "no turn is running")], "events after the cancelled result: \(tail)")
        }
    }

    /// An event the first turn may send before its tool runs: a word, its tool use, the
    /// permission request for it.
    private static func isFirstTurnBeforeItsToolRuns(_ e: ChannelEvent) -> Bool {
        switch e {
        case .partial: return true
        case .toolUse(let id, _, _): return id == "toolu_1_1"
        case .permissionRequest(let id, _, _): return id == "toolu_1_1"
        default: return false
        }
    }

    @Test func newMessagePreemptsTheRunningTurn() async throws {
        // 100 ms a word: the first turn normally still streams its opening sentence (12 words
        // to go) when the second prompt arrives. Should a slow build let it get further first —
        // to its tool use and permission request, which nobody answers — the second prompt
        // pre-empts it there instead; what is asserted holds either way.
        let server = try await AgentServerProcess(["--word-delay-ms", "100"])
        try await withChannel(try server.endpoint()) { channel in
            try await channel.send(.message(content: "first prompt"))
            var seen = 0
            let oldHead = await readEvents(channel) { e in
                if case .partial = e { seen += 1 }
                return seen == 2
            }
            // The new turn's permission request only is answered.
            let events = try await runTurn(channel, prompt: "second prompt", decision: .allowOnce,
                                           answering: { $0.hasPrefix("toolu_2_") }) {
                $0.resultSubtype == .success
            }
            // The old turn ends with `cancelled` before anything of the new one: what comes
            // first is only the rest of the old turn, in order.
            let cancelled = try #require(events.firstIndex { $0.resultSubtype == .cancelled }, "\(events)")
            let newTurn = Array(events[(cancelled + 1)...])
            let oldTail = Array(events[..<cancelled])
            #expect(oldTail.allSatisfy(Self.isFirstTurnBeforeItsToolRuns), "before the cancelled result: \(oldTail)")
            let oldText = partialText(oldHead + oldTail)
            #expect("You asked: first prompt. Let me look at the files in the workspace first.".hasPrefix(oldText),
                    "the old turn's text: \(oldText)")
            let text = try #require(assistantText(newTurn))
            #expect(text.hasPrefix("You asked: second prompt."))
            #expect(partialText(newTurn) == text, "old-turn text leaked into the new turn: \(newTurn)")
            #expect(!newTurn.contains { if case .partial(let t) = $0 { t == " first" } else { false } })
            #expect(newTurn.filter { $0.resultSubtype != nil }.count == 1)
            #expect(newTurn.last?.resultSubtype == .success)
            #expect(newTurn.contains { if case .toolUse(let id, _, _) = $0 { id == "toolu_2_1" } else { false } })
        }
    }

    @Test func badBearerTokenIsRejectedWith401() async throws {
        let server = try await AgentServerProcess(["--token", "right-token"])
        for token in [nil, "wrong-token", "right-toke", "right-token-"] as [String?] {
            do {
                _ = try await withChannel(try server.endpoint(token: token)) { _ in Issue.record("connected with \(token ?? "no token")") }
            } catch let error as SwitchboardError {
                #expect(error.kind == .handshakeRejected)
                #expect(error.httpStatus == 401)
                #expect(error.httpBody?.contains("authentication_error") == true)
                #expect(!"\(error)".contains("right-token"))
            }
        }
        // The right token, as a header and as ?token=.
        let ok = try await withChannel(try server.endpoint(token: "right-token")) { channel in
            try await channel.send(.cancel)
            return await readEvents(channel) { _ in true }
        }
        #expect(ok == [.system(message: "no turn is running")])
        let adapter = SocketAdapter()
        let url = "ws://127.0.0.1:\(server.port)/v1/ws?session_id=q&token=right-token"
        _ = try await adapter.connect(to: try WebSocketURLEndpoint(url: url))
        await adapter.close()
        // No session id: 400.
        do {
            _ = try await SocketAdapter().connect(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(server.port)/v1/ws?token=right-token"))
            Issue.record("connected without session_id")
        } catch {
            #expect(error.httpStatus == 400)
        }
    }

    @Test func withChannelClosesTheSocketWhenTheBodyThrows() async throws {
        struct Boom: Error {}
        let server = try await AgentServerProcess()
        let session = "throwing-\(UUID().uuidString)"
        let kept = TestLock<Channel?>(nil)
        await #expect(throws: Boom.self) {
            try await withChannel(try server.endpoint(session: session)) { channel in
                kept.withLock { $0 = channel }
                try await channel.send(.message(content: "start something"))
                throw Boom()
            }
        }
        let channel = try #require(kept.withLock { $0 })
        #expect(await channel.isClosed)
        #expect(await channel.closeStatus?.code == .normalClosure)
        #expect(await server.waitForLog("session \(session) closed: 1000"), "server log: \(server.stderr)")
    }

    @Test func withChannelClosesTheSocketWhenCancelled() async throws {
        let server = try await AgentServerProcess()
        let session = "cancelled-\(UUID().uuidString)"
        let endpoint = try server.endpoint(session: session)
        let (entered, enteredContinuation) = AsyncStream<Void>.makeStream()
        let task = Task {
            try await withChannel(endpoint) { channel in
                try await channel.send(.message(content: "stream forever"))
                enteredContinuation.yield()
                try await Task.sleep(for: .seconds(30))
            }
        }
        #expect(await server.waitForLog("session \(session) opened"))
        // Cancel once the body runs (not during the opening handshake, which would be a
        // different path: the connect itself is cancelled).
        for await _ in entered { break }
        task.cancel()
        await #expect(throws: CancellationError.self) { try await task.value }
        #expect(await server.waitForLog("session \(session) closed: 1000"), "server log: \(server.stderr)")
    }

    @Test func messagesAreRateLimitedPerConnection() async throws {
        // One token per 1000 s: the count refused does not depend on how fast this build runs.
        let server = try await AgentServerProcess(["--rate", "0.001", "--burst", "3"])
        try await withChannel(try server.endpoint()) { channel in
            for i in 0..<6 { try await channel.send(.message(content: "m\(i)")) }
            var limited: [Double] = []
            _ = await readEvents(channel) { e in
                if case .rateLimited(let r) = e { limited.append(r) }
                return limited.count == 3
            }
            #expect(limited.count == 3)
            #expect(limited.allSatisfy { $0 > 900 && $0 <= 1000 }, "\(limited)")
        }
    }

    @Test func invalidCommandsGetAnErrorEvent() async throws {
        let server = try await AgentServerProcess()
        try await withChannel(try server.endpoint()) { channel in
            let adapter = SocketAdapter()  // unused: commands below go through the channel's connection
            _ = adapter
            try await channel.send(.permission(toolUseId: "nope", decision: .deny))
            let events = await readEvents(channel) { _ in true }
            #expect(events == [.error(message: "no pending permission request nope", type: "invalid_request_error",
                                      param: "tool_use_id", code: "unknown_tool_use_id")])
        }
    }

    // MARK: --agent-command

    private func commandServer() async throws -> AgentServerProcess {
        try await AgentServerProcess(["--agent-command", "python3 -u \(AgentServerProcess.fakeAgent.path)"])
    }

    @Test func bridgesAnExternalCommandLineByLine() async throws {
        let server = try await commandServer()
        let events = try await withChannel(try server.endpoint()) { channel in
            try await channel.send(.message(content: "héllo ✓", model: "fake"))
            return await readEvents(channel, until: isResult)
        }
        #expect(events == [
            .partial(text: "Echo:"),
            .partial(text: " héllo ✓"),
            .toolUse(id: "ext_tool", name: "grep", input: ["pattern": "a\"b\\c", "n": 3, "unicode": "日本語 ✓"]),
            .toolResult(id: "ext_tool", content: "3 matches", isError: false),
            .assistant(text: "Echo: héllo ✓", model: "fake-1", stopReason: "end_turn"),
            .response(content: "Echo: héllo ✓", tokensUsed: 7),
            .result(numTurns: 1, durationMs: 42, totalCostUsd: 0.001, subtype: .success),
        ])
        // Two log lines from two pipes of the agent (stderr, stdout): either may come first.
        #expect(await server.waitForLog("fake agent got prompt 'héllo ✓'"), "stderr is logged: \(server.stderr)")
        #expect(await server.waitForLog("this line is not JSON"), "dropped stdout is logged: \(server.stderr)")
    }

    @Test func externalCommandWithoutResultGivesAnError() async throws {
        let server = try await commandServer()
        let events = try await withChannel(try server.endpoint()) { channel in
            try await channel.send(.message(content: "no result"))
            return await readEvents(channel, until: isResult)
        }
        #expect(events.first == .partial(text: "about to fail"))
        #expect(events.contains(.error(message: "agent command exited with status 3 without a result",
                                       type: "agent_error", param: nil, code: "no_result")))
        #expect(events.last?.resultSubtype == .error)
    }

    @Test func externalCommandPermissionIsForwarded() async throws {
        let server = try await commandServer()
        let events = try await withChannel(try server.endpoint()) { channel in
            try await runTurn(channel, prompt: "permission", decision: .alwaysAllow)
        }
        #expect(events.contains(.permissionRequest(toolUseId: "ext_1", name: "rm", input: ["path": "/tmp/x"])))
        #expect(events.contains(.toolResult(id: "ext_1", content: "always_allow", isError: false)))
        #expect(events.last?.resultSubtype == .success)
    }

    @Test func cancelKillsTheExternalProcess() async throws {
        let server = try await commandServer()
        try await withChannel(try server.endpoint()) { channel in
            try await channel.send(.message(content: "sleep"))
            let first = await readEvents(channel) { _ in true }
            guard case .system(let message)? = first.first, let pid = Int32(message.dropFirst(4)) else {
                Issue.record("expected the pid: \(first)")
                return
            }
            #expect(kill(pid, 0) == 0)
            let sent = ContinuousClock.now
            try await channel.send(.cancel)
            let after = await readEvents(channel, until: isResult)
            #expect(after == [after.last].compactMap { $0 })
            #expect(after.last?.resultSubtype == .cancelled)
            print("external command cancel latency: \(String(format: "%.2f", milliseconds(ContinuousClock.now - sent))) ms")
            // Generous, yet well under the 600 s the agent would otherwise sleep.
            let deadline = ContinuousClock.now + .seconds(60)
            while kill(pid, 0) == 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            #expect(kill(pid, 0) != 0, "agent process \(pid) still running after cancel")
            // It was asked first (SIGTERM, which it could handle), not only killed.
            #expect(await server.waitForLog("fake agent got SIGTERM"), "the agent never got SIGTERM: \(server.stderr)")
        }
    }

    /// What the agent started goes with it: the agent leads a process group of its own, and a
    /// cancelled turn ends the whole group (here a child still holding the agent's stdout,
    /// which would otherwise keep the pipe and its reader thread for ever).
    @Test func cancelKillsWhatTheExternalProcessStarted() async throws {
        let server = try await commandServer()
        try await withChannel(try server.endpoint()) { channel in
            try await channel.send(.message(content: "sleep with a child"))
            let first = await readEvents(channel) { _ in true }
            guard case .system(let message)? = first.first,
                  let child = message.split(separator: " ").last.flatMap({ Int32($0) }) else {
                Issue.record("expected the pids: \(first)")
                return
            }
            #expect(!Self.isGone(child))
            try await channel.send(.cancel)
            let after = await readEvents(channel, until: isResult)
            #expect(after.last?.resultSubtype == .cancelled)
            let deadline = ContinuousClock.now + .seconds(60)
            while !Self.isGone(child), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            #expect(Self.isGone(child), "the agent's child \(child) still runs after cancel")
        }
    }

    /// Whether `pid` has exited: no such process, or a zombie until its new parent collects it.
    private static func isGone(_ pid: pid_t) -> Bool {
        #if os(Linux)
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return true }
        return stat.split(separator: ")").last?.split(separator: " ").first == "Z"
        #else
        return kill(pid, 0) != 0
        #endif
    }
}

/// Not a speed assertion: measures and prints the median cancel latency.
@Suite("cancel latency measurement", .serialized)
struct CancelLatencyMeasurement {
    @Test func medianCancelLatencyOver20Cancels() async throws {
        let server = try await AgentServerProcess(["--rate", "1000", "--burst", "1000"])
        var samples: [Double] = []
        try await withChannel(try server.endpoint()) { channel in
            for i in 0..<20 {
                try await channel.send(.message(content: "turn \(i)"))
                _ = await readEvents(channel) { if case .partial = $0 { true } else { false } }
                let sent = ContinuousClock.now
                try await channel.send(.cancel)
                let after = await readEvents(channel, until: isResult)
                samples.append(milliseconds(ContinuousClock.now - sent))
                #expect(after.last?.resultSubtype == .cancelled)
            }
        }
        let sorted = samples.sorted()
        let median = (sorted[9] + sorted[10]) / 2
        print("cancel latency over \(samples.count) cancels: median \(String(format: "%.2f", median)) ms, "
            + "min \(String(format: "%.2f", sorted.first!)) ms, max \(String(format: "%.2f", sorted.last!)) ms")
        #expect(samples.count == 20)
    }
}
