import Foundation
import SwitchboardChannel

/// A deterministic pretend agent (no network, no model): streams an answer word by word,
/// asks permission for one tool (`list_files`), runs it with progress, and finishes.
struct BuiltInAgent: Agent {
    var wordDelay: Duration = .milliseconds(30)
    static let defaultModel = "switchboard-demo-1"
    static let toolName = "list_files"

    func run(prompt: String, model: String?, turn: TurnContext) async throws {
        var text = ""
        try await stream("You asked: \(prompt). Let me look at the files in the workspace first.",
                         into: &text, turn: turn)
        let toolID = "toolu_\(turn.number)_1"
        let input: JSONValue = ["path": ".", "pattern": "*"]
        try await turn.emit(.toolUse(id: toolID, name: Self.toolName, input: input))
        guard let decision = await turn.requestPermission(toolUseId: toolID, name: Self.toolName, input: input) else {
            throw CancellationError()
        }
        let outro: String
        if decision.allows {
            let toolStart = ContinuousClock.now
            for _ in 1...3 {
                try await Task.sleep(for: .milliseconds(40))
                let elapsed = ContinuousClock.now - toolStart
                let seconds = (Double(elapsed.components.attoseconds) / 1e18 + Double(elapsed.components.seconds))
                try await turn.emit(.toolProgress(id: toolID, elapsedSeconds: (seconds * 1000).rounded() / 1000))
            }
            try await turn.emit(.toolResult(id: toolID, content: "README.md\nPackage.swift\nSources/", isError: false))
            outro = "The workspace has three entries: README.md, Package.swift and Sources."
        } else {
            try await turn.emit(.toolResult(id: toolID, content: "permission denied", isError: true))
            outro = "I could not list the files because permission was denied."
        }
        try await stream(" " + outro, into: &text, turn: turn)
        let tokens = prompt.split(separator: " ").count + text.split(separator: " ").count * 2
        try await turn.emit(.assistant(text: text, model: model ?? Self.defaultModel, stopReason: "end_turn"))
        try await turn.emit(.response(content: text, tokensUsed: tokens))
        try await turn.emit(.result(numTurns: turn.number, durationMs: turn.elapsedMilliseconds,
                                    totalCostUsd: Double(tokens) * 0.000015, subtype: .success))
    }

    /// Emits `sentence` as one `partial` per word (the space goes with the following word).
    private func stream(_ sentence: String, into text: inout String, turn: TurnContext) async throws {
        var pieces: [String] = []
        var current = ""
        for ch in sentence {
            if ch == " ", !current.isEmpty, current != " " {
                pieces.append(current)
                current = ""
            }
            current.append(ch)
        }
        if !current.isEmpty { pieces.append(current) }
        for piece in pieces {
            try await Task.sleep(for: wordDelay)
            try await turn.emit(.partial(text: piece))
            text += piece
        }
    }
}
