import ArgumentParser
import Foundation
import Switchboard
import SwitchboardCore
import ChatRoomCore
import ExampleSupport

/// `chat-room join`: a terminal client.
struct Join: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Join a room from the terminal.",
        discussion: """
            Type a line to send it to the current room. Commands: /join ROOM, /leave ROOM, /quit.
            If the server goes away (restart, network loss) the client reconnects with backoff and
            joins its rooms again; with --no-reconnect it exits instead.
            With --token-command, the command's output is the token (a server with tokens): it
            runs before each connection and again at 80% of the token's lifetime, and the new
            token is sent in-band ('refresh'); --user may then be left out (the token's name).
            Exits 0 at end of input, 1 if the connection ends for good.
            """)

    @Option(help: "WebSocket URL of the server.") var url = "ws://127.0.0.1:8080/v1/ws"
    @Option(help: "Room to join.") var room = "general"
    @Option(help: "Your user name (with --token-command: optional, and if given the token's name).") var user: String?
    @Option(help: "Bearer token (default: $CHAT_TOKEN).") var token: String?
    @Option(help: ArgumentHelp(
        "A shell command printing a token (run with /bin/sh -c); run again before the token expires.",
        discussion: "For a server with --jwt-secret-file, --jwt-public-key or --jwks-file. Excludes --token."))
    var tokenCommand: String?
    @Option(help: ArgumentHelp(
        "Seconds one run of --token-command may take; then it is killed with what it started.",
        valueName: "seconds"))
    var tokenTimeout: Double = Double(TokenCommand.defaultTimeout.components.seconds)
    @Flag(inversion: .prefixedNo, help: "Reconnect (and re-join rooms) when the connection is lost.")
    var reconnect = true
    @OptionGroup var network: ClientNetworkOptions

    func validate() throws {
        if tokenCommand != nil && token != nil { throw ValidationError("--token and --token-command exclude each other") }
        if !(tokenTimeout > 0 && tokenTimeout <= 86_400) { throw ValidationError("--token-timeout must be in (0, 86400] seconds") }
        if tokenCommand == nil && user == nil { throw ValidationError("--user is required (optional only with --token-command)") }
    }

    func run() async throws {
        // With a token command, the adapter's provider sets the Authorization header.
        let token = tokenCommand != nil ? nil
            : self.token ?? ProcessInfo.processInfo.environment["CHAT_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        let endpoint: ChatEndpoint
        do {
            endpoint = try ChatEndpoint(url: url, token: token, tls: try network.tlsConfiguration(),
                                        proxy: try network.proxyConfiguration())
        } catch let error as SwitchboardError {
            throw ValidationError(error.description)
        }

        let joined = JoinedRooms(user: user, rooms: [room])
        var provider: (@Sendable () async throws -> SocketToken)?
        var refreshCommand: (@Sendable (SocketToken) -> String)?
        if let tokenCommand {
            let command = TokenCommand(command: tokenCommand, timeout: .seconds(tokenTimeout))
            provider = { try await command.token() }
            refreshCommand = { ChatCommand.refresh(token: $0.value).message }
        }
        let policy = reconnect ? ReconnectPolicy(baseDelay: .milliseconds(250), maxDelay: .seconds(5)) : .never
        let socket = SocketAdapter(reconnect: policy, tokenProvider: provider, refreshCommand: refreshCommand)
        // Re-joins with the last message id seen in each room: the server sends what was missed
        // (exactly once, in order) and, with the room's key, takes over this user's stale presence.
        await socket.onReconnect { socket in
            for point in await joined.resumePoints() {
                try await socket.send(command: ChatCommand.join(room: point.room, user: joined.user, since: point.since,
                                                                rejoinKey: point.rejoinKey))
            }
        }
        let stateReporter = Task {
            for await state in socket.states {
                switch state {
                case .reconnecting(let attempt, let delay):
                    Terminal.print("* connection lost; reconnecting (attempt \(attempt), in \(delay.formatted(.units(allowed: [.seconds, .milliseconds]))))")
                case .connected:
                    if await joined.hasConnectedOnce { Terminal.print("* reconnected") }
                    await joined.markConnected()
                default:
                    break
                }
            }
        }
        defer { stateReporter.cancel() }
        let lines: AsyncStream<Data>
        do { lines = try await socket.connect(to: endpoint) } catch {
            // The body is the server's: shown escaped.
            Terminal.print("! cannot connect: \(error.description)\(error.httpBody.map { " \(shown($0))" } ?? "")")
            throw ExitCode(1)
        }
        await send(ChatCommand.join(room: room, user: user), on: socket)

        let quitting = QuitFlag()
        let initialRoom = room
        let userName = user
        // stdin on its own thread (blocking reads), commands sent from this task.
        let input = Task {
            var current: String? = initialRoom
            var rooms: [String] = [initialRoom]
            for await text in Terminal.stdinLines() {
                let parts = text.split(separator: " ", maxSplits: 1).map(String.init)
                switch parts.first {
                case "/quit":
                    break
                case "/join" where parts.count == 2:
                    await send(ChatCommand.join(room: parts[1], user: userName), on: socket)
                    current = parts[1]
                    if !rooms.contains(parts[1]) { rooms.append(parts[1]) }
                    await joined.set(rooms)
                    continue
                case "/leave" where parts.count == 2:
                    await send(ChatCommand.leave(room: parts[1]), on: socket)
                    rooms.removeAll { $0 == parts[1] }
                    await joined.set(rooms)
                    if current == parts[1] { current = rooms.last }
                    continue
                case let c? where c.hasPrefix("/"):
                    Terminal.print("! unknown command (use /join ROOM, /leave ROOM, /quit)")
                    continue
                default:
                    if text.isEmpty { continue }
                    guard let current else { Terminal.print("! not in a room (use /join ROOM)"); continue }
                    await send(ChatCommand.message(room: current, text: text), on: socket)
                    continue
                }
                break
            }
            // Cancelled: the connection ended first (the iteration above ends on cancellation
            // too), and that is what the user must be told, not a quit.
            if Task.isCancelled { return }
            // End of input or /quit: close cleanly.
            await quitting.set()
            await socket.close(code: .normalClosure, reason: "bye")
        }

        for await line in lines {
            if let event = try? JSONDecoder().decode(ServerEvent.self, from: line) { await joined.saw(event) }
            if let text = EventFormatter.format(line) { Terminal.print(text) }
        }
        input.cancel()
        if await quitting.value { return }
        let status = await socket.closeStatus
        let code = status.map { "\($0.code.rawValue)" } ?? "1006"
        let reason = status?.reason ?? ""
        Terminal.print("connection closed (\(code)\(reason.isEmpty ? "" : " \(shown(reason))"))")
        throw ExitCode(1)
    }
}

/// The rooms to join again after a reconnect, the last message id seen in each, and the key of
/// this user's presence there (from the `presence` answering its join; kept in memory only).
actor JoinedRooms {
    /// nil: the token names the user.
    nonisolated let user: String?
    private(set) var rooms: [String]
    private(set) var hasConnectedOnce = false
    private var lastSeen: [String: Int64] = [:]
    private var keys: [String: String] = [:]
    init(user: String?, rooms: [String]) {
        self.user = user
        self.rooms = rooms
    }
    func set(_ rooms: [String]) {
        self.rooms = rooms
        keys = keys.filter { rooms.contains($0.key) }
    }
    func markConnected() { hasConnectedOnce = true }

    /// Remembers the newest message id of a `message` or `history` event, and the key of a
    /// `presence`.
    func saw(_ event: ServerEvent) {
        guard let room = event.room else { return }
        if event.type == "presence", let key = event.rejoinKey { keys[room] = key }
        let ids: [Int64] = switch event.type {
        case "message": event.id.map { [$0] } ?? []
        case "history": (event.messages ?? []).map(\.id)
        default: []
        }
        if let newest = ids.max(), newest > lastSeen[room] ?? 0 { lastSeen[room] = newest }
    }

    /// Each joined room with the id to resume after (0: no message seen yet) and the key of the
    /// presence to take over (nil before the first `presence`).
    func resumePoints() -> [(room: String, since: Int64, rejoinKey: String?)] {
        rooms.map { ($0, lastSeen[$0] ?? 0, keys[$0]) }
    }
}

actor QuitFlag {
    private(set) var value = false
    func set() { value = true }
}

/// Turns server event lines into readable terminal lines. Everything that comes from the server
/// (rooms, names, text, error messages) goes through ``shown(_:)``.
enum EventFormatter {
    static func format(_ line: Data) -> String? {
        guard let e = try? JSONDecoder().decode(ServerEvent.self, from: line) else {
            return line.isEmpty ? nil : "? \(shown(String(decoding: line, as: UTF8.self)))"
        }
        let r = "[\(shown(e.room ?? "?"))]"
        let user = shown(e.user ?? "?")
        switch e.type {
        case "message": return "\(r) \(user): \(shown(e.text ?? ""))"
        case "join": return "\(r) * \(user) joined"
        case "leave": return "\(r) * \(user) left"
        case "typing": return e.isTyping == true ? "\(r) * \(user) is typing…" : nil
        case "presence": return "\(r) users: \((e.users ?? []).map(shown).joined(separator: ", "))"
        case "history":
            var lines = (e.messages ?? []).map { "\(r) \(shown($0.user)): \(shown($0.text))" }
            // After a reconnect: more was missed than the server sends back.
            if e.complete == false { lines.insert("\(r) * earlier messages were missed (not all are kept)", at: 0) }
            return lines.isEmpty ? nil : lines.joined(separator: "\n")
        case "refreshed": return "* token refreshed"
        case "error":
            let retry = e.error?.retry_after.map { " (retry after \($0) s)" } ?? ""
            return "! \(shown(e.error?.message ?? "error"))\(retry)"
        default: return nil
        }
    }
}

/// Text from the server as printed: control characters escaped (`TerminalText.escaped`),
/// and every line after the first indented by two spaces, so that a newline in a message
/// cannot start a line that passes for an event (`[room] name: …`, `* …`, `! …`).
private func shown(_ text: String) -> String {
    TerminalText.escaped(text).replacingOccurrences(of: "\n", with: "\n  ")
}

enum Terminal {
    /// Writes a line to stdout unbuffered (stdout is often a pipe).
    static func print(_ text: String) {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }

    /// Lines of standard input, read on a dedicated thread; finishes at EOF.
    static func stdinLines() -> AsyncStream<String> {
        AsyncStream { continuation in
            let thread = Thread {
                while let line = readLine(strippingNewline: true) {
                    continuation.yield(line)
                }
                continuation.finish()
            }
            thread.start()
        }
    }
}

/// Sends a command typed at the terminal; a failure (not connected, reconnecting with no room
/// to queue) is shown instead of being dropped silently.
private func send(_ command: ChatCommand, on socket: SocketAdapter) async {
    do {
        try await socket.send(command: command)
    } catch {
        Terminal.print("! not sent: \(error.description)")
    }
}
