import ArgumentParser

/// A multi-room chat server (WebSocket + SQLite history + a browser page) and a terminal client.
@main
struct ChatRoom: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chat-room",
        abstract: "Multi-room WebSocket chat: server with browser page and history, and a terminal client.",
        subcommands: [Serve.self, Join.self],
        defaultSubcommand: Serve.self)
}
