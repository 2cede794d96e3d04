import Foundation
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
        let escaped = #"\u{1B}[2J\u{1B}]0;pwned\u{07}x\u{0D}[general] carol: fake\u{9B}31m\u{7F}\u{00}"# + "\ttab"
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
}
