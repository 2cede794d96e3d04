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
}
