import Foundation
import SwitchboardTestSupport
import Testing

/// `chat-room join`, driven through its stdin and stdout.
@Suite(.timeLimit(.minutes(5)))           // a hang guard only: each wait has its own bound
struct TerminalClientTests {
    @Test func typesAndReceivesMessages() async throws {
        let server = try await ChatServerProcess(db: try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite"))
        defer { server.child.signal(SIGKILL) }
        let bob = try await TestPeer.connect("bob", url: server.wsURL)
        try await bob.send(.join(room: "general", user: "bob"))
        try await bob.expect("history") { $0.type == "history" }

        let alice = try ChildProcess(executable: try ChatPaths.binary(),
                                     arguments: ["join", "--url", server.wsURL, "--room", "general", "--user", "alice"])
        defer { alice.signal(SIGKILL) }
        try await alice.waitForLine("presence line") { $0 == "[general] users: bob, alice" }
        try await bob.expect("alice joined") { $0.type == "join" && $0.user == "alice" }

        alice.write("hello from the terminal\n")
        let m = try await bob.expect("terminal message") { $0.type == "message" && $0.text == "hello from the terminal" }
        #expect(m.user == "alice")

        try await bob.send(.message(room: "general", text: "hi"))
        try await alice.waitForLine("incoming message") { $0 == "[general] bob: hi" }
        try await bob.send(.typing(room: "general", isTyping: true))
        try await alice.waitForLine("typing") { $0 == "[general] * bob is typing…" }

        // Errors are shown as "! message"; a second room becomes the current one.
        alice.write("/join \(String(repeating: "x", count: 65))\n")
        try await alice.waitForLine("error line") { $0.hasPrefix("! invalid room name") }
        alice.write("/join second\n")
        try await alice.waitForLine("second presence") { $0 == "[second] users: alice" }
        alice.write("in the second room\n")
        try await alice.waitForLine("own echo") { $0 == "[second] alice: in the second room" }
        alice.write("/leave second\n")
        try await alice.waitForLine("leave") { $0 == "[second] * alice left" }

        // End of input: clean close, exit 0, and the room hears about it.
        alice.closeStdin()
        #expect(await alice.waitForExit() == 0)
        try await bob.expect("alice left") { $0.type == "leave" && $0.user == "alice" }
        #expect(!(await bob.events).contains { $0.text == "in the second room" })
        #expect(await server.stop() == 0)
    }

    /// Text from the server (message text, in `history` and live) is printed with its control
    /// characters other than tab and newline escaped, and a newline in a message starts an
    /// indented line: no escape sequence reaches the terminal and no line can pass for an event.
    @Test func controlCharactersFromTheServerAreShownEscaped() async throws {
        let server = try await ChatServerProcess(db: try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite"))
        defer { server.child.signal(SIGKILL) }
        let bob = try await TestPeer.connect("bob", url: server.wsURL)
        try await bob.send(.join(room: "general", user: "bob"))
        try await bob.expect("history") { $0.type == "history" }
        let hostile = "\u{1B}[2J\u{1B}]0;pwned\u{07}x\r[general] carol: fake\u{9B}31m\u{7F}\u{00}\ttab\n[general] dave: second"
        let escaped = #"\x1b[2J\x1b]0;pwned\x07x\x0d[general] carol: fake\x9b31m\x7f\x00"# + "\ttab"
        try await bob.send(.message(room: "general", text: "old " + hostile))
        try await bob.expect("own message") { $0.type == "message" }

        let alice = try ChildProcess(executable: try ChatPaths.binary(),
                                     arguments: ["join", "--url", server.wsURL, "--room", "general", "--user", "alice"])
        defer { alice.signal(SIGKILL) }
        try await alice.waitForLine("the history line") { $0 == "[general] bob: old " + escaped }
        try await alice.waitForLine("its second line, indented") { $0 == "  [general] dave: second" }
        try await bob.send(.message(room: "general", text: "live " + hostile))
        try await alice.waitForLine("the live line") { $0 == "[general] bob: live " + escaped }
        try await bob.send(.message(room: "general", text: "end"))
        try await alice.waitForLine("the last line") { $0 == "[general] bob: end" }
        let lines = alice.lines
        #expect(lines.filter { $0 == "  [general] dave: second" }.count == 2, "\(lines)")
        #expect(!lines.contains { $0.hasPrefix("[general] carol") || $0.hasPrefix("[general] dave") }, "\(lines)")
        let controls = lines.filter { $0.unicodeScalars.contains { $0.properties.generalCategory == .control && $0 != "\t" } }
        #expect(controls.isEmpty, "\(controls)")
        alice.closeStdin()
        #expect(await alice.waitForExit() == 0)
        #expect(await server.stop() == 0)
    }

    /// The terminal client keeps the `rejoinKey` of each room's `presence` and sends it, with
    /// `since`, when it re-joins after a cut: a stand-in server (Peers/recording_chat_server.py)
    /// records what it sends, a TCP relay cuts the connection twice.
    @Test func rejoinsCarryEachRoomsKeyAndSince() async throws {
        try await Python.require(module: "websockets", hint: "pip install websockets")
        let recorder = try ChildProcess(executable: URL(fileURLWithPath: "/usr/bin/env"),
                                        arguments: ["python3", "-u", ChatPaths.peers.appendingPathComponent("recording_chat_server.py").path])
        defer { recorder.signal(SIGKILL) }
        let listening = try await recorder.waitForLine("the stand-in server's port") { $0.hasPrefix("LISTENING ") }
        let port = try #require(Int(listening.dropFirst("LISTENING ".count)))
        let relay = try TCPRelay(targetPort: port)
        defer { relay.stop() }
        let terminal = try ChildProcess(executable: try ChatPaths.binary(),
                                        arguments: ["join", "--url", "ws://127.0.0.1:\(relay.port)/v1/ws", "--room", "r", "--user", "term"])
        defer { terminal.signal(SIGKILL) }
        try await terminal.waitForLine("presence in r") { $0 == "[r] users: term" }
        terminal.write("/join s\n")
        try await terminal.waitForLine("presence in s") { $0 == "[s] users: term" }

        struct Join: Decodable { var type: String; var room: String; var user: String; var since: Int64?; var rejoinKey: String? }
        for cut in 1...2 {
            #expect(relay.cutAll() == 1)
            let connection = cut + 1
            for room in ["r", "s"] {
                let line = try await recorder.waitForLine("the re-join of \(room) on connection \(connection)") {
                    $0.hasPrefix("conn\(connection) ") && $0.contains(#""room":"\#(room)""#)
                }
                let join = try JSONDecoder().decode(Join.self, from: Data(line.dropFirst("conn\(connection) ".count).utf8))
                #expect(join.type == "join" && join.user == "term", "\(line)")
                // The id of the last message the previous connection's history held, and the key
                // of its presence.
                #expect(join.since == Int64(41 + cut), "\(line)")
                #expect(join.rejoinKey == "key-\(room)-\(cut)", "\(line)")
            }
            // Both answers printed (so their keys are kept) before the next cut.
            for room in ["r", "s"] {
                try await terminal.waitForLine("presence in \(room) on connection \(connection)") { _ in
                    terminal.lines.filter { $0 == "[\(room)] users: term" }.count >= connection
                }
            }
        }
        terminal.closeStdin()
        #expect(await terminal.waitForExit() == 0)
        recorder.closeStdin()
    }
}
