import ArgumentParser
import Dispatch
import ExampleSupport
import Foundation
import Switchboard
import SwitchboardCore
import SwitchboardChannel
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// `agent-stream ask`: one prompt, rendered as it streams.
struct Ask: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send one prompt and render the streamed turn (Ctrl-C cancels it).")

    @Option(help: "Server base URL (host only), e.g. ws://127.0.0.1:8090") var url = "ws://127.0.0.1:8090"
    @Option(help: "Session id (default: a new UUID).") var session: String?
    @Option(help: "Bearer token. Default: $AGENT_TOKEN (keeps it out of ps).") var token: String?
    @Option(help: "Model to ask for.") var model: String?
    @Flag(help: "Answer every permission request with allow once.") var autoAllow = false
    @Flag(help: "End when the connection is lost instead of reconnecting and resuming the turn.")
    var noReconnect = false
    @Argument(help: "The prompt.") var prompt: String

    func run() async throws {
        let endpoint: ChannelEndpoint
        do {
            let token = self.token ?? ProcessInfo.processInfo.environment["AGENT_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
            endpoint = try ChannelEndpoint(baseURL: url, sessionID: session ?? UUID().uuidString, token: token)
        } catch {
            throw ValidationError("\(error)")
        }
        let outcome: ResultSubtype?
        do {
            // Reconnects with backoff and resumes the session where it was (last_seq): the turn
            // keeps running on the server for its grace period.
            let policy = noReconnect ? ReconnectPolicy.never
                : ReconnectPolicy(baseDelay: .milliseconds(250), maxDelay: .seconds(5), maxAttempts: 30,
                                  whileDisconnected: .queue(maxCommands: 16))
            outcome = try await withChannel(endpoint, reconnect: policy) { channel in
                try await converse(channel)
            }
        } catch let error as SwitchboardError {
            if error.httpStatus == 401 {
                log("unauthorized: check --token or $AGENT_TOKEN")
            } else {
                log(TerminalText.escaped("\(error)"))
            }
            throw ExitCode(1)
        }
        switch outcome {
        case .success?: return
        case .cancelled?: throw ExitCode(130)
        default: throw ExitCode(1)
        }
    }

    private func converse(_ channel: Channel) async throws -> ResultSubtype? {
        let interrupt = Interrupt(channel: channel)
        interrupt.install()
        defer { interrupt.uninstall() }
        // An id: were it sent again, the session would not run it twice.
        try await channel.send(.message(content: prompt, model: model, id: UUID().uuidString))
        let renderer = Renderer()
        var answered: [String: PermissionDecision] = [:]
        for await event in channel.events {
            if case .permissionRequest(let id, _, _) = event, let decision = answered[id] {
                // Sent again after a reconnect (our answer may have been lost): the same answer.
                try await channel.send(.permission(toolUseId: id, decision: decision))
                continue
            }
            renderer.render(event)
            switch event {
            case .permissionRequest(let id, let name, let input):
                let decision = autoAllow ? PermissionDecision.allowOnce : await askUser(name: name, input: input)
                if autoAllow { out("  (auto-allowed)\n") }
                answered[id] = decision
                try await channel.send(.permission(toolUseId: id, decision: decision))
            case .resumeFailed(let reason) where reason == "session_not_found":
                // The session (and its turn) ended while we were away: no result will come.
                return nil
            case .result(_, _, _, let subtype):
                return subtype
            case .rateLimited, .error:
                if interrupt.fired { return .cancelled }
            default:
                break
            }
        }
        out("\n")
        if interrupt.fired { return .cancelled }
        log(TerminalText.escaped("connection ended before the turn finished\(await channel.lastError.map { ": \($0)" } ?? "")"))
        return nil
    }

    private func askUser(name: String, input: JSONValue) async -> PermissionDecision {
        while true {
            out("  Allow \(TerminalText.escaped(name))? [a] allow once  [A] always allow  [d] deny: ")
            let answer = await readLineAsync()
            switch answer?.trimmingCharacters(in: .whitespaces) {
            case "a": return .allowOnce
            case "A": return .alwaysAllow
            case "d", "D", nil: return .deny
            default: continue
            }
        }
    }

    /// `readLine()` on a thread of its own, so the cooperative pool is not blocked.
    private func readLineAsync() async -> String? {
        await withCheckedContinuation { (c: CheckedContinuation<String?, Never>) in
            Thread.detachNewThread { c.resume(returning: readLine()) }
        }
    }
}

/// Renders events as they arrive: inline text, tool cards, a summary line. Everything the
/// server sent is shown through ``TerminalText/escaped(_:)``: control characters other than tab
/// and newline appear as `\x1b`-style escapes, so an agent cannot drive the terminal.
final class Renderer: @unchecked Sendable {
    // Safety: used from one task only.
    private var midLine = false

    func render(_ event: ChannelEvent) {
        switch event {
        case .partial(let text):
            show(text)
            midLine = true
        case .assistant:
            break
        case .toolUse(let id, let name, let input):
            newline()
            show("┌─ tool \(name) [\(id)] \(input.jsonText)\n")
        case .toolProgress(_, let elapsed):
            show("│  running… \(String(format: "%.2f", elapsed)) s\n")
        case .toolResult(_, let content, let isError):
            let first = content.split(separator: "\n").map(String.init).joined(separator: ", ")
            show("└─ \(isError ? "✗ error" : "✓ done"): \(first)\n")
        case .permissionRequest(let id, let name, let input):
            newline()
            show("? permission requested for \(name) [\(id)] \(input.jsonText)\n")
        case .response(_, let tokens):
            newline()
            show("(\(tokens) tokens)\n")
        case .result(let turns, let ms, let cost, let subtype):
            newline()
            show("— \(subtype) · turn \(turns) · \(ms) ms · $\(String(format: "%.4f", cost))\n")
        case .system(let message):
            newline()
            show("[system] \(message)\n")
        case .resumeFailed(let reason):
            newline()
            show("[resume failed: \(reason)] events of this session were lost\n")
        case .refreshed:
            break
        case .error(let message, let type, _, _):
            newline()
            show("[error\(type.map { " \($0)" } ?? "")] \(message)\n")
        case .rateLimited(let retryAfter):
            newline()
            show("[rate limited] retry after \(retryAfter) s\n")
        case .unknown(let type, _):
            newline()
            show("[unknown event \(type)]\n")
        case .decodingFailed(let raw, let reason):
            newline()
            show("[undecodable line: \(reason)] \(raw.prefix(120))\n")
        }
    }

    /// Prints `text`, control characters escaped (the renderer's own text has none but `\n`).
    private func show(_ text: String) {
        out(TerminalText.escaped(text))
    }

    private func newline() {
        if midLine { show("\n") }
        midLine = false
    }
}

/// Ctrl-C: the first one sends `cancel` and closes the channel if the cancelled `result` has
/// not arrived within 1.5 s; a second one exits at once (130).
final class Interrupt: Sendable {
    private let channel: Channel
    private let state = Protected<(source: DispatchSourceSignal?, count: Int)>((nil, 0))
    private let queue = DispatchQueue(label: "agent-stream.sigint")

    init(channel: Channel) { self.channel = channel }

    var fired: Bool { state.withLock { $0.count > 0 } }

    func install() {
        signal(SIGINT, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGINT, queue: queue)
        let channel = self.channel
        source.setEventHandler { [self] in
            let count = state.withLock { s in
                s.count += 1
                return s.count
            }
            if count > 1 { exit(130) }
            out("\n^C cancelling…\n")
            Task {
                do {
                    try await channel.send(.cancel)
                    // Give the agent time to report the cancelled turn before closing.
                    try await Task.sleep(for: .milliseconds(1500))
                } catch {
                    out("could not cancel: \(error)\n")
                }
                await channel.close()
            }
        }
        source.resume()
        state.withLock { $0.source = source }
    }

    func uninstall() {
        state.withLock { s in
            s.source?.cancel()
            s.source = nil
        }
        signal(SIGINT, SIG_DFL)
    }
}
