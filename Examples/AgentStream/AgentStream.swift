import ArgumentParser
import Foundation

/// A demo of the `/v1/ws` agent channel: a server that streams agent turns (a built-in
/// deterministic agent, or any command speaking JSON lines) and a terminal client.
@main
struct AgentStream: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "agent-stream",
        abstract: "Stream agent turns over the /v1/ws WebSocket channel.",
        subcommands: [Serve.self, Ask.self])
}

/// Writes to stderr at once (logs).
func log(_ message: String) {
    FileHandle.standardError.write(Data("agent-stream: \(message)\n".utf8))
}

/// Writes to stdout at once (no buffering, so pipes see it immediately).
func out(_ text: String) {
    FileHandle.standardOutput.write(Data(text.utf8))
}
