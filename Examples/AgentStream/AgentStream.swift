import ArgumentParser

@main
struct AgentStream: AsyncParsableCommand {
    func run() async throws { print("agent-stream: not implemented yet") }
}
