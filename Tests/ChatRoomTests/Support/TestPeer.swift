import Foundation
import Switchboard
import SwitchboardCore
import ChatRoomCore

/// A server event as the tests see it.
struct Event: Decodable, Sendable, CustomStringConvertible {
    struct ErrorBody: Decodable, Sendable {
        var message: String; var type: String; var code: String; var retry_after: Double?
        /// In `unconfirmed`: the id of the message stored but not confirmed.
        var id: Int64?
    }
    var type: String
    var id: Int64?
    var ts: Int64?
    var room: String?
    var user: String?
    var text: String?
    var isTyping: Bool?
    var users: [String]?
    var messages: [Event]?
    var complete: Bool?
    /// In the `presence` answering this connection's own `join`: the key of its re-joins.
    var rejoinKey: String?
    /// In `refreshed`: the connection's deadline, Unix seconds.
    var exp: Int64?
    var error: ErrorBody?
    var raw: String = ""

    private enum CodingKeys: String, CodingKey {
        case type, id, ts, room, user, text, isTyping, users, messages, complete, rejoinKey, exp, error
    }

    var description: String { raw.isEmpty ? "\(type) \(room ?? "") \(user ?? "") \(text ?? "")" : raw }

    static func parse(_ line: String) -> Event? {
        guard var e = try? JSONDecoder().decode(Event.self, from: Data(line.utf8)) else { return nil }
        e.raw = line
        return e
    }
}

/// One of "our" clients: ``SocketAdapter`` + the typed ``ChatCommand``; collects events.
actor TestPeer {
    let name: String
    let socket: SocketAdapter
    private(set) var events: [Event] = []
    private var consumed = Set<Int>()
    private(set) var finished = false

    init(_ name: String, socket: SocketAdapter = SocketAdapter()) { self.name = name; self.socket = socket }

    /// `socket`: an adapter of the test's own (a token provider, a reconnect policy).
    static func connect(_ name: String, url: String, token: String? = nil,
                        socket: SocketAdapter = SocketAdapter()) async throws -> TestPeer {
        let peer = TestPeer(name, socket: socket)
        try await peer.open(url: url, token: token)
        return peer
    }

    private func open(url: String, token: String?) async throws {
        let lines = try await socket.connect(to: try ChatEndpoint(url: url, token: token))
        Task { [weak self] in
            for await line in lines {
                let text = String(decoding: line, as: UTF8.self)
                await self?.received(text)
            }
            await self?.finish()
        }
    }

    private func received(_ line: String) {
        if let e = Event.parse(line) { events.append(e) }
    }
    private func finish() { finished = true }

    func send(_ command: ChatCommand) async throws { try await socket.send(command: command) }
    func sendRaw(_ text: String) async throws { try await socket.send(text: text) }

    /// Waits for the first not-yet-matched event satisfying `predicate`, and marks it matched.
    /// The timeout only ends a failing wait: generous, for the ThreadSanitizer build of the
    /// server on a loaded machine.
    @discardableResult
    func expect(_ what: String, timeout: Duration = .seconds(60), _ predicate: @Sendable (Event) -> Bool) async throws -> Event {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let i = events.indices.first(where: { !consumed.contains($0) && predicate(events[$0]) }) {
                consumed.insert(i)
                return events[i]
            }
            if ContinuousClock.now >= deadline {
                throw TestFailure("\(name): timed out waiting for \(what); got \(events.map(\.description))")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    @discardableResult
    func expectError(code: String, type: String) async throws -> Event {
        let e = try await expect("error \(code)") { $0.type == "error" && $0.error?.code == code }
        guard e.error?.type == type else { throw TestFailure("\(name): error \(code) has type \(e.error?.type ?? "nil"), expected \(type)") }
        return e
    }

    /// Waits until the connection has ended; returns the close code.
    func waitForClose(timeout: Duration = .seconds(60)) async throws -> UInt16? {
        let deadline = ContinuousClock.now + timeout
        while !finished {
            if ContinuousClock.now >= deadline { throw TestFailure("\(name): connection did not close") }
            try await Task.sleep(for: .milliseconds(10))
        }
        return await socket.closeStatus?.code.rawValue
    }

    func close() async { await socket.close() }
}
