import Foundation
import Switchboard
import SwitchboardCore
import ChatRoomCore

/// Runs one WebSocket connection: reads lines, rate-limits, validates, updates rooms, persists
/// messages, and broadcasts. Bad input gets an `error` event to the sender only.
struct ChatSession {
    let connection: WebSocketConnection
    let server: WebSocketServer
    let backend: any ChatBackend
    /// Rooms this connection has joined → its user name there.
    private var joined: [String: String] = [:]
    private var limiter: RateLimiter

    init(connection: WebSocketConnection, server: WebSocketServer, backend: any ChatBackend,
         limiter: RateLimiter = RateLimiter()) {
        self.limiter = limiter
        self.connection = connection
        self.server = server
        self.backend = backend
    }

    /// Serves the connection until it closes. Throws when a reply cannot be sent (the connection
    /// failed under it); the rooms are told the user left either way.
    mutating func run() async throws {
        do {
            for await line in connection.lines() {
                if case .limited(let retryAfter) = limiter.take() {
                    try await reply(.error(.rateLimited(retryAfter: retryAfter)))
                    continue
                }
                // Blank lines are keep-alives: ignored.
                if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { continue }
                switch ChatValidation.parse(line) {
                case .failure(let e): try await reply(.error(e))
                case .success(let command): try await handle(command)
                }
            }
        } catch {
            await leaveEveryRoom()
            throw error
        }
        await leaveEveryRoom()
    }

    /// Connection gone: tell each room.
    private mutating func leaveEveryRoom() async {
        for (room, user) in joined {
            await backend.leave(room: room, user: user, connection: connection)
            await publish(ServerEvent(type: "leave", id: EventStamp.nextID(), ts: EventStamp.nowMillis(), room: room, user: user),
                          to: room)
        }
        joined = [:]
    }

    private mutating func handle(_ command: ClientCommand) async throws {
        switch command {
        case .join(let room, let user):
            if joined[room] != nil { return try await reply(.error(.alreadyJoined(room))) }
            switch await backend.join(room: room, user: user, connection: connection) {
            case .failure(let e):
                try await reply(.error(e))
            case .success(let users):
                joined[room] = user
                await publish(ServerEvent(type: "join", id: EventStamp.nextID(), ts: EventStamp.nowMillis(), room: room, user: user),
                              to: room)
                try await reply(ServerEvent(type: "presence", room: room, users: users))
                do {
                    let history = try await backend.recent(room: room)
                    try await reply(ServerEvent(type: "history", room: room, messages: history))
                } catch let e as ChatError {
                    try await reply(.error(e))
                } catch {
                    try await reply(.error(.internalError))
                }
            }
        case .message(let room, let text):
            guard let user = joined[room] else { return try await reply(.error(.notJoined(room))) }
            do {
                _ = try await backend.post(room: room, user: user, text: text)
            } catch let e as ChatError {
                try await reply(.error(e))
            } catch {
                try await reply(.error(.internalError))
            }
        case .typing(let room, let isTyping):
            guard let user = joined[room] else { return try await reply(.error(.notJoined(room))) }
            await publish(ServerEvent(type: "typing", id: EventStamp.nextID(), ts: EventStamp.nowMillis(), room: room,
                                      user: user, isTyping: isTyping), to: room, excludingSelf: true)
        case .leave(let room):
            guard let user = joined[room] else { return try await reply(.error(.notJoined(room))) }
            // Published before unsubscribing, so the leaver gets it too (as an acknowledgement).
            await publish(ServerEvent(type: "leave", id: EventStamp.nextID(), ts: EventStamp.nowMillis(), room: room, user: user),
                          to: room)
            await backend.leave(room: room, user: user, connection: connection)
            joined[room] = nil
        }
    }

    private func reply(_ event: ServerEvent) async throws {
        try await connection.send(text: event.line)
    }

    private func publish(_ event: ServerEvent, to room: String, excludingSelf: Bool = false) async {
        await server.publish(text: event.line, to: RoomDirectory.topic(room), excluding: excludingSelf ? connection : nil)
    }
}
