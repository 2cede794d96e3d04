import Testing
import SwitchboardChannel
import Switchboard
import SwitchboardCore

// The README's "Stream an agent" snippet, verbatim: it must compile, and it runs against the
// built-in agent in `readmeSnippetRunsATurn`.
func ask(_ prompt: String, port: Int) async throws -> String {
    let endpoint = try ChannelEndpoint(baseURL: "ws://127.0.0.1:\(port)", sessionID: "demo", token: nil)
    return try await withChannel(endpoint) { channel in          // always closed afterwards
        try await channel.send(.message(content: prompt))
        var answer = ""
        for await event in channel.events {
            switch event {
            case .partial(let text): answer += text               // streamed word by word
            case .permissionRequest(let id, _, _):                // the agent waits for us
                try await channel.send(.permission(toolUseId: id, decision: .allowOnce))
            case .result: return answer                            // turn finished
            default: continue
            }
        }
        return answer
    }
}

@Suite("README agent snippet")
struct ReadmeSnippetTests {
    @Test func readmeSnippetRunsATurn() async throws {
        let server = try await AgentServerProcess()
        let answer = try await ask("hello", port: server.port)
        #expect(!answer.isEmpty)
    }
}
