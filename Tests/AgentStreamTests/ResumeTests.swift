import Foundation
import Testing
import SwitchboardChannel
import Switchboard
import SwitchboardTestSupport
import SwitchboardCore

/// Sessions outlive their connections: a client cut off mid-turn reconnects with `last_seq` and
/// gets the rest of the turn once, in order (a small TCP relay drops the connection).
@Suite("agent-stream: resuming sessions", .serialized)
struct ResumeTests {
    /// Reconnects quickly, forever, queueing commands sent while disconnected.
    static let policy = ReconnectPolicy(baseDelay: .milliseconds(20), maxDelay: .milliseconds(200),
                                        whileDisconnected: .queue(maxCommands: 16))

    /// Runs a turn to its result, answering every permission request (also one sent again
    /// after a reconnect) with `allow_once`.
    static func runTurn(_ channel: Channel, prompt: String, id: String? = nil) async throws -> [ChannelEvent] {
        try await channel.send(.message(content: prompt, id: id))
        var events: [ChannelEvent] = []
        while true {
            let chunk = await readEvents(channel) { e in
                if case .permissionRequest = e { return true }
                return isResult(e)
            }
            events += chunk
            guard let last = chunk.last else { return events }
            if case .permissionRequest(let toolUse, _, _) = last {
                try await channel.send(.permission(toolUseId: toolUse, decision: .allowOnce))
                continue
            }
            return events
        }
    }

    /// The first event on connecting to `endpoint`, then the answer to a `cancel` (with no turn
    /// running: `no turn is running`).
    static func firstEventThenCancelReply(_ endpoint: ChannelEndpoint) async throws -> [ChannelEvent] {
        try await withChannel(endpoint) { channel in
            let first = await readEvents(channel) { _ in true }
            try await channel.send(.cancel)
            return first + (await readEvents(channel) { _ in true })
        }
    }

    /// The connection is cut every 700 bytes from the server (several times within the turn,
    /// wherever that falls in a frame, the permission round trip included); the channel
    /// reconnects and resumes. The turn arrives whole: every streamed word once and in order,
    /// each event of the turn once.
    @Test func aTurnCutManyTimesArrivesWholeAndOnce() async throws {
        let server = try await AgentServerProcess(["--word-delay-ms", "5"])
        let relay = try TCPRelay(targetPort: server.port)
        defer { relay.stop() }
        relay.cutEvery(downstreamBytes: 700)
        let endpoint = try ChannelEndpoint(baseURL: "ws://127.0.0.1:\(relay.port)", sessionID: UUID().uuidString, token: nil)
        let events = try await withChannel(endpoint, reconnect: Self.policy) { channel in
            try await Self.runTurn(channel, prompt: "hello agent", id: "turn-1")
        }
        relay.cutEvery(downstreamBytes: nil)
        #expect(relay.cutCount >= 3, "the turn was cut \(relay.cutCount) times")
        // A permission request may come twice (sent again while pending); nothing else may.
        let withoutRepeatedRequests = events.enumerated().filter { i, e in
            guard case .permissionRequest = e else { return true }
            return !events[..<i].contains(e)
        }.map(\.element)
        #expect(collapsedTypes(withoutRepeatedRequests) == ["partial", "tool_use", "permission_request", "tool_progress",
                                                            "tool_result", "partial", "assistant", "response", "result"])
        let text = try #require(assistantText(events))
        #expect(text.hasPrefix("You asked: hello agent."))
        #expect(partialText(events) == text, "a streamed word was lost or repeated")
        for type in ["tool_use", "tool_result", "assistant", "response", "result"] {
            #expect(events.filter { $0.type == type }.count == 1, "\(type) not exactly once")
        }
        #expect(events.last?.resultSubtype == .success)
        #expect(await server.waitForLog("resumed"))
    }

    /// The connection is lost before the first event arrives (the relay drops it, those bytes
    /// unsent): the channel resumes from the session's start, not with the live stream only,
    /// so the events the turn sent meanwhile arrive, once.
    @Test func aConnectionCutBeforeItsFirstEventLosesNothing() async throws {
        let server = try await AgentServerProcess(["--word-delay-ms", "5"])
        let relay = try TCPRelay(targetPort: server.port)
        defer { relay.stop() }
        let endpoint = try ChannelEndpoint(baseURL: "ws://127.0.0.1:\(relay.port)", sessionID: UUID().uuidString, token: nil)
        let events = try await withChannel(endpoint, reconnect: Self.policy) { channel in
            relay.cutBeforeNextDownstream()
            return try await Self.runTurn(channel, prompt: "hello agent", id: "turn-1")
        }
        #expect(relay.cutCount == 1)
        #expect(events.first?.type == "partial")
        let text = try #require(assistantText(events))
        #expect(text.hasPrefix("You asked: hello agent."))
        #expect(partialText(events) == text, "a streamed word was lost or repeated")
        #expect(events.last?.resultSubtype == .success)
        #expect(await server.waitForLog("resumed"))
    }

    /// `agent-stream ask` itself, through the same relay: the cut connection is resumed and the
    /// turn printed whole.
    @Test func askSurvivesItsConnectionBeingCut() async throws {
        let server = try await AgentServerProcess(["--word-delay-ms", "5"])
        let relay = try TCPRelay(targetPort: server.port)
        defer { relay.stop() }
        relay.cutEvery(downstreamBytes: 700)
        let ask = Process()
        ask.executableURL = try AgentServerProcess.binary()
        ask.arguments = ["ask", "--url", "ws://127.0.0.1:\(relay.port)", "--auto-allow", "hello there"]
        let out = Pipe()
        ask.standardOutput = out
        ask.standardError = FileHandle.nullDevice
        ask.standardInput = FileHandle.nullDevice
        try ask.run()
        let output = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        ask.waitUntilExit()
        #expect(ask.terminationStatus == 0, "\(output)")
        #expect(relay.cutCount >= 3)
        #expect(output.components(separatedBy: "You asked: hello there.").count == 2, "\(output)")
        #expect(output.components(separatedBy: "The workspace has three entries").count == 2, "\(output)")
        #expect(output.components(separatedBy: "— success").count == 2, "\(output)")
    }

    /// After the grace period with no connection the session ends (its turn cancelled); a
    /// client coming back is told, then gets a new session.
    @Test func aSessionGoneAfterItsGracePeriodIsReported() async throws {
        let server = try await AgentServerProcess(["--resume-grace", "0.2"])
        let session = UUID().uuidString
        var endpoint = try server.endpoint(session: session)
        let last: UInt64? = try await withChannel(endpoint) { channel in
            try await channel.send(.message(content: "hello"))
            // Leaves while the turn waits for a permission.
            _ = await readEvents(channel) { if case .permissionRequest = $0 { true } else { false } }
            return channel.lastSequence
        }
        #expect(await server.waitForLog("session \(session) ended"))
        #expect(last != nil)
        endpoint.lastSequence = last
        let events = try await Self.firstEventThenCancelReply(endpoint)
        #expect(events == [.resumeFailed(reason: "session_not_found"), .system(message: "no turn is running")])
    }

    /// A server that restarted knows nothing of the session: the client is told, and the new
    /// session numbers its events from 1.
    @Test func aRestartedServerReportsTheSessionAsGone() async throws {
        let server = try await AgentServerProcess()
        var endpoint = try server.endpoint()
        endpoint.lastSequence = 12   // from the server's previous life
        try await withChannel(endpoint) { channel in
            #expect(await readEvents(channel) { _ in true } == [.resumeFailed(reason: "session_not_found")])
            #expect(channel.lastSequence == 1)
            try await channel.send(.cancel)
            #expect(await readEvents(channel) { _ in true } == [.system(message: "no turn is running")])
            #expect(channel.lastSequence == 2)
        }
    }

    /// A client that falls further behind than the session's buffer is told what it lost.
    @Test func resumingBeyondTheBufferIsReported() async throws {
        // 40 events: one turn (about 30) fits, two do not.
        let server = try await AgentServerProcess(["--resume-buffer", "40", "--word-delay-ms", "0"])
        var endpoint = try server.endpoint()
        try await withChannel(endpoint) { channel in
            for prompt in ["one", "two"] {
                let turn = try await Self.runTurn(channel, prompt: prompt)
                #expect(turn.last?.resultSubtype == .success)
            }
        }
        endpoint.lastSequence = 1
        let events = try await Self.firstEventThenCancelReply(endpoint)
        #expect(events == [.resumeFailed(reason: "buffer_exceeded"), .system(message: "no turn is running")])
    }

    /// A client that stops reading while its session streams far more than the buffer holds is
    /// closed with 1013 at once (the buffer is also the session's send queue), and told what it
    /// lost when it resumes.
    @Test func aClientThatStopsReadingIsClosedAndToldWhatItLost() async throws {
        let server = try await AgentServerProcess(["--agent-command", "python3 -u \(AgentServerProcess.fakeAgent.path)",
                                                   "--resume-buffer", "50",
                                                   // The session must outlive the flood however slow the
                                                   // machine (run Q, ThreadSanitizer: the default 30 s ran out
                                                   // before the turn finished: session_not_found).
                                                   "--resume-grace", "600"])
        let session = UUID().uuidString
        var endpoint = try server.endpoint(session: session)
        let channel = try await Channel.connect(endpoint)
        // 40 MB of events: more than the socket buffers and both queues hold.
        try await channel.send(.message(content: "flood 40000"))
        #expect(await server.waitForLog("client too slow"))
        _ = await readEvents(channel) { _ in false }   // what reached us, to the end of the stream
        #expect(await channel.closeStatus?.code == .tryAgainLater)
        #expect(await channel.closeStatus?.reason == "event buffer exceeded")
        // Nothing past the close reached the client: it resumes from where it really is, once
        // the flood is over (the buffer then holds its last 50 events only).
        #expect(await server.waitForLog("session \(session): turn 1 finished"))
        endpoint.lastSequence = channel.lastSequence ?? 0   // 0: it may have received nothing
        let first = try await withChannel(endpoint) { channel in await readEvents(channel) { _ in true } }
        #expect(first == [.resumeFailed(reason: "buffer_exceeded")])
    }

    /// A client resuming while the flood goes on is told what it lost first, even when the
    /// buffer overruns again before its writer has sent anything (the close comes after).
    @Test func resumingIntoAFloodIsToldFirst() async throws {
        let server = try await AgentServerProcess(["--agent-command", "python3 -u \(AgentServerProcess.fakeAgent.path)",
                                                   "--resume-buffer", "50", "--resume-grace", "600"])
        var endpoint = try server.endpoint()
        let channel = try await Channel.connect(endpoint)
        try await channel.send(.message(content: "flood 40000"))
        #expect(await server.waitForLog("client too slow"))
        _ = await readEvents(channel) { _ in false }
        #expect(await channel.closeStatus?.code == .tryAgainLater)
        // Resumes as a client that received nothing: the buffer had dropped event 1 by the time
        // of the close (it closes when an event not sent yet is dropped).
        endpoint.lastSequence = 0
        let first = try await withChannel(endpoint) { channel in await readEvents(channel) { _ in true } }
        #expect(first == [.resumeFailed(reason: "buffer_exceeded")])
    }

    /// A second connection takes the session over (the first is closed with 1008 "replaced");
    /// a client with another token may not (403).
    @Test func takeoverIsForTheSameTokenOnly() async throws {
        let server = try await AgentServerProcess()
        let session = UUID().uuidString
        let first = try await Channel.connect(try server.endpoint(session: session, token: "alice-token"))
        let second = try await Channel.connect(try server.endpoint(session: session, token: "alice-token"))
        _ = await readEvents(first) { _ in false }   // ends when the server closes it
        #expect(await first.closeStatus?.code == .policyViolation)
        #expect(await first.closeStatus?.reason == "replaced")
        for token in ["mallory-token", nil] {
            do {
                let intruder = try await Channel.connect(try server.endpoint(session: session, token: token))
                Issue.record("a client with token \(token ?? "none") took the session")
                await intruder.close()
            } catch let error as SwitchboardError {
                #expect(error.kind == .handshakeRejected && error.httpStatus == 403, "\(error)")
            }
        }
        try await second.send(.cancel)
        #expect(await readEvents(second) { _ in true } == [.system(message: "no turn is running")])
        await second.close()
        #expect(!server.stderr.contains("alice-token"), "the token was logged")
    }

    /// A message whose `id` the session already ran is not run again.
    @Test func aRepeatedMessageIDRunsOnce() async throws {
        let server = try await AgentServerProcess(["--word-delay-ms", "0"])
        try await withChannel(try server.endpoint()) { channel in
            let turn = try await Self.runTurn(channel, prompt: "hello", id: "m-1")
            #expect(turn.last?.resultSubtype == .success)
            try await channel.send(.message(content: "hello", id: "m-1"))
            try await channel.send(.cancel)
            // Had the repeated message started a turn, a partial would come before the cancel's result.
            #expect(await readEvents(channel) { _ in true } == [.system(message: "no turn is running")])
        }
        #expect(await server.waitForLog("message m-1 already received, not run again"))
    }
}
