import Foundation
import Testing
import SwitchboardChannel
import Switchboard
import SwitchboardTestSupport
import SwitchboardCore

/// The token stays out of `ps`, and what peers send stays out of the terminal and the log as
/// control sequences.
@Suite("agent-stream: tokens from the environment, peer text made safe", .serialized)
struct TokenAndTextTests {
    /// `serve` takes its token from `AGENT_TOKEN` when `--token` is not given, and `ask` too.
    @Test func serveAndAskReadTheTokenFromAGENT_TOKEN() async throws {
        let server = try await AgentServerProcess(["--word-delay-ms", "0"], environment: ["AGENT_TOKEN": "env-token"])
        do {
            _ = try await Channel.connect(try server.endpoint())
            Issue.record("connected without the token")
        } catch let error as SwitchboardError {
            #expect(error.httpStatus == 401)
        }
        let ok = try await withChannel(try server.endpoint(token: "env-token")) { channel in
            try await channel.send(.cancel)
            return await readEvents(channel) { _ in true }
        }
        #expect(ok == [.system(message: "no turn is running")])
        let (status, output) = try await runAsk(["--url", "ws://127.0.0.1:\(server.port)", "--auto-allow", "hi"],
                                                environment: ["AGENT_TOKEN": "env-token"])
        #expect(status == 0, "\(output)")
        #expect(output.contains("— success"), "\(output)")
        #expect(!server.stderr.contains("env-token"), "the token was logged")
    }

    /// A server with a shared token (no signed tokens) has nothing to refresh: `refresh` gets
    /// an `error` `refresh_unsupported`, numbered like any error, and the session goes on.
    @Test func refreshWithoutSignedTokensIsUnsupported() async throws {
        let server = try await AgentServerProcess(environment: ["AGENT_TOKEN": "env-token"])
        let client = try await RawAgentClient.connect(port: server.port, session: UUID().uuidString, token: "env-token")
        try await client.refresh("env-token")
        try await client.send(#"{"type":"refresh","data":{}}"#)
        try await client.send(#"{"type":"cancel","data":{}}"#)
        let lines = await client.read { $0.seq == 3 }
        #expect(lines.map(\.errorCode) == ["refresh_unsupported", "invalid_command", nil], "\(lines)")
        #expect(lines.last?.systemMessage == "no turn is running")
        await client.close()
    }

    /// Session ids (and message ids) reach the log escaped and cut: an id carrying an escape sequence and a
    /// newline cannot recolour the log or forge a line of it.
    @Test func sessionIDsAreLoggedEscaped() async throws {
        let server = try await AgentServerProcess()
        let hostile = "x\u{1b}[31mred\nagent-stream: session forged opened" + String(repeating: "y", count: 5000)
        try await withChannel(try server.endpoint(session: hostile)) { channel in
            // A message id is the client's too: the repeated one is logged, escaped.
            try await channel.send(.message(content: "hi", id: "m\u{1b}[2J"))
            try await channel.send(.message(content: "hi", id: "m\u{1b}[2J"))
            try await channel.send(.cancel)
            _ = await readEvents(channel) { $0.resultSubtype == .cancelled }
        }
        #expect(await server.waitForLog("closed"))
        #expect(await server.waitForLog(#"message m\x1b[2J already received"#))
        let log = server.stderr
        #expect(!log.contains("\u{1b}"), "raw escape in the log")
        #expect(!log.contains("\nagent-stream: session forged"), "a forged log line")
        #expect(log.contains(#"session x\x1b[31mred\x0aagent-stream: session forged opened"#), "\(log.prefix(500))")
        #expect(!log.contains(String(repeating: "y", count: 100)), "the id was not cut")
    }

    /// `ask` shows the server's control characters escaped (tab and newline kept): an agent's
    /// escape sequences, carriage returns and bell never reach the terminal.
    @Test func askShowsControlCharactersEscaped() async throws {
        let server = try await AgentServerProcess(["--agent-command", "python3 -u \(AgentServerProcess.fakeAgent.path)"])
        let (status, output) = try await runAsk(["--url", "ws://127.0.0.1:\(server.port)", "--auto-allow", "escapes"])
        #expect(status == 0, "\(output)")
        for raw in ["\u{1b}", "\r", "\u{07}", "\u{9b}", "\u{202e}"] {
            #expect(!output.contains(raw), "\(raw.unicodeScalars.first.map { String($0.value, radix: 16) } ?? "") reached the terminal")
        }
        #expect(output.contains(#"\x1b[2J\x1b]0;pwned\x07"#), "\(output)")
        #expect(output.contains(#"\x0dfake: line"#), "\(output)")
        #expect(output.contains(#"tool \x1b[31mrm"#), "\(output)")
        #expect(output.contains(#"\u{202e}txt.exe"#), "\(output)")
        #expect(output.contains("tab\there\nsecond line"), "tab and newline are kept: \(output)")
    }

    /// Runs `agent-stream ask` to its end: exit status and stdout.
    private func runAsk(_ arguments: [String], environment: [String: String] = [:]) async throws -> (Int32, String) {
        let ask = Process()
        ask.executableURL = try AgentServerProcess.binary()
        ask.arguments = ["ask"] + arguments
        ask.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let out = Pipe()
        ask.standardOutput = out
        ask.standardError = FileHandle.nullDevice
        ask.standardInput = FileHandle.nullDevice
        try ask.run()
        let output = await Task.detached {
            String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        }.value
        ask.waitUntilExit()
        return (ask.terminationStatus, output)
    }
}
