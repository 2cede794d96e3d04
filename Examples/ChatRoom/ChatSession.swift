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
    /// Rooms this connection may be in at once: a `join` beyond gets `too_many_rooms`.
    private let maxRooms: Int
    /// The token's identity (servers with tokens): the name every `join` takes, the rooms it
    /// may join, the subject its presences belong to. nil: the client names itself.
    private let identity: ChatIdentity?
    /// Verifies a `refresh`'s token (servers with tokens).
    private let verifyRefresh: RefreshVerifier?

    init(connection: WebSocketConnection, server: WebSocketServer, backend: any ChatBackend,
         limiter: RateLimiter = RateLimiter(), maxRooms: Int = ChatLimits.defaultMaxRoomsPerConnection,
         identity: ChatIdentity? = nil, verifyRefresh: RefreshVerifier? = nil) {
        self.limiter = limiter
        self.maxRooms = maxRooms
        self.identity = identity
        self.verifyRefresh = verifyRefresh
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
                switch ChatValidation.parse(line, userRequired: identity == nil) {
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
            // Not this connection's any more (a re-join took the name over): nobody left.
            guard await backend.leave(room: room, user: user, connection: connection) else { continue }
            await publish(ServerEvent(type: "leave", id: EventStamp.nextID(), ts: EventStamp.nowMillis(), room: room, user: user),
                          to: room)
        }
        joined = [:]
    }

    private mutating func handle(_ command: ClientCommand) async throws {
        switch command {
        case .join(let room, let requested, let since, let rejoinKey):
            if joined[room] != nil { return try await reply(.error(.alreadyJoined(room))) }
            let user: String
            switch name(requested, room: room) {
            case .failure(let e): return try await reply(.error(e))
            case .success(let u): user = u
            }
            // Before anything is subscribed or written (here, in Redis): refused, it costs nothing.
            if joined.count >= maxRooms { return try await reply(.error(.tooManyRooms(maxRooms))) }
            if let since { return try await rejoin(room: room, user: user, since: since, rejoinKey: rejoinKey) }
            let claim = PresenceClaim(newKey: RejoinKey.make(), rejoinKey: nil, owner: identity?.subject)
            switch await backend.join(room: room, user: user, connection: connection, claim: claim) {
            case .failure(let e):
                try await reply(.error(e))
            case .success(let result):
                joined[room] = user
                // A presence of the same subject taken over (its stale connection): still
                // present for the others, no join event.
                if !result.replaced {
                    await publish(ServerEvent(type: "join", id: EventStamp.nextID(), ts: EventStamp.nowMillis(), room: room,
                                              user: user), to: room)
                }
                try await reply(ServerEvent(type: "presence", room: room, users: result.users, rejoinKey: result.rejoinKey))
                do {
                    // With `next`: where the client pages back from (the `history` command).
                    let page = try await backend.history(room: room, before: nil, limit: ChatLimits.historyCount)
                    try await reply(.history(room: room, page))
                } catch let e as ChatError {
                    try await reply(.error(e))
                } catch {
                    try await reply(.error(.internalError))
                }
            }
        case .message(let room, let text, let clientID):
            guard let user = joined[room] else { return try await reply(.error(.notJoined(room))) }
            if backend.requiredReplicaAcks > 0 {
                return try await postConfirmed(room: room, user: user, text: text, clientID: clientID)
            }
            do {
                // A retry (a client id seen in the room within 10 minutes): neither stored nor
                // broadcast again; the first one reached the room, or the re-join's history.
                _ = try await backend.post(room: room, user: user, text: text, clientID: clientID)
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
            _ = await backend.leave(room: room, user: user, connection: connection)
            joined[room] = nil
        case .refresh(let token):
            try await refresh(token)
        case .history(let room, let before, let limit):
            guard joined[room] != nil else { return try await reply(.error(.notJoined(room))) }
            do {
                try await reply(.history(room: room, try await backend.history(room: room, before: before, limit: limit)))
            } catch let e as ChatError {
                try await reply(.error(e))
            } catch {
                try await reply(.error(.internalError))
            }
        }
    }

    /// The name a `join` takes and whether the room is allowed: without tokens the `user` given;
    /// with them the token's display name (`forbidden` when `user` names someone else), in a
    /// room its `rooms` claim allows (`room_forbidden`).
    private func name(_ requested: String?, room: String) -> Result<String, ChatError> {
        guard let identity else {
            guard let requested else { return .failure(.missingField("user")) }
            return .success(requested)
        }
        let own: String
        do throws(ChatError) { own = try ChatValidation.validName(identity.name, field: "user") } catch { return .failure(error) }
        if let requested, requested != own { return .failure(.forbidden(requested)) }
        guard identity.rooms.allows(room) else { return .failure(.roomForbidden(room)) }
        return .success(own)
    }

    /// `refresh`: a new token of the same subject moves the connection's deadline to its `exp`
    /// (never earlier) and is answered by `refreshed` with the deadline in Unix seconds. Any
    /// other token (bad signature, expired, another `sub`) gets `invalid_token` and the
    /// connection keeps its old deadline.
    private func refresh(_ token: String) async throws {
        guard let identity, let verifyRefresh else { return try await reply(.error(.refreshUnsupported)) }
        let verified: RefreshedToken
        switch await verifyRefresh(token) {
        case .failure(let e): return try await reply(.error(e))
        case .success(let v): verified = v
        }
        guard verified.subject == identity.subject else {
            return try await reply(.error(.invalidToken("the token is for another subject")))
        }
        if let exp = verified.expiresAt {
            await connection.extendAuthentication(until: exp)
        } else if await connection.authenticationExpiresAt != nil {
            return try await reply(.error(.invalidToken("a refresh token must have an 'exp'")))
        }
        let deadline = await connection.authenticationExpiresAt
        try await reply(ServerEvent(type: "refreshed", exp: deadline.flatMap(TokenExpiry.unixSeconds)))
    }

    /// A join with `since` (a re-join after a reconnect): the room's events are held for this
    /// connection from before its presence is written until the history of what it missed is
    /// sent, so the history and the live events join with no gap, no duplicate and in id order.
    /// A presence of the same name held by another connection (the one the client lost, not
    /// noticed gone yet) is taken over only with its `rejoinKey`, or by the same token subject;
    /// otherwise `name_taken`.
    private mutating func rejoin(room: String, user: String, since: Int64, rejoinKey: String?) async throws {
        let topic = RoomDirectory.topic(room)
        let catchUp = await server.subscribeCatchingUp(connection, to: topic)
        let result: JoinedPresence
        let claim = PresenceClaim(newKey: RejoinKey.make(), rejoinKey: rejoinKey, owner: identity?.subject)
        switch await backend.join(room: room, user: user, connection: connection, claim: claim) {
        case .failure(let e):
            await catchUp.cancel()
            server.unsubscribe(connection, from: topic)
            return try await reply(.error(e))
        case .success(let r):
            result = r
        }
        joined[room] = user
        // Still present for the others (its old connection was not noticed gone yet): no join event.
        if !result.replaced {
            await publish(ServerEvent(type: "join", id: EventStamp.nextID(), ts: EventStamp.nowMillis(), room: room, user: user),
                          to: room)
        }
        try await reply(ServerEvent(type: "presence", room: room, users: result.users, rejoinKey: result.rejoinKey))
        let history: ServerEvent
        let newest: Int64
        do {
            let missed = try await backend.messages(room: room, after: since)
            history = ServerEvent(type: "history", room: room, messages: missed.messages, complete: missed.complete)
            newest = max(since, missed.messages.last?.id ?? since)
        } catch {
            await catchUp.cancel()
            return try await reply(.error(error as? ChatError ?? .internalError))
        }
        // Live messages the history already holds (published while it was read, or reaching this
        // node late from another one) are skipped; the first newer one ends the filtering.
        try await catchUp.finish(sending: .text(Array(history.line.utf8))) { payload in
            guard let id = MessageEventID.of(payload) else { return .deliver }
            return id <= newest ? .skip : .deliverAndStopFiltering
        }
    }

    /// A `message` with `--redis-min-replicas-ack` above 0: the sender's confirmation (its own
    /// echo, carrying the id) is held until the replicas acknowledged the message. The room's
    /// events are held for this connection from before the post until the wait is over, so the
    /// echo keeps its place among them. Confirmed: the held events go out (the echo among them;
    /// for a retry, which is not broadcast again, the stored message is sent to the sender
    /// only). Not confirmed in time: the echo is dropped for the sender, who gets an
    /// `unconfirmed` error with the id instead; the others got the message as usual.
    private func postConfirmed(room: String, user: String, text: String, clientID: String?) async throws {
        let catchUp = await server.subscribeCatchingUp(connection, to: RoomDirectory.topic(room))
        let outcome: PostOutcome
        do {
            outcome = try await backend.postReportingRetry(room: room, user: user, text: text, clientID: clientID)
        } catch {
            await catchUp.cancel()
            return try await reply(.error(error as? ChatError ?? .internalError))
        }
        let id = outcome.message.id
        if await backend.waitForReplicas(of: outcome.message) {
            if outcome.isRetry {
                try await catchUp.finish(sending: .text(Array(ServerEvent.message(outcome.message).line.utf8)))
            } else {
                await catchUp.cancel()
            }
            return
        }
        // The echo may still be on its way (pub/sub): the filter stays until a newer message.
        try await catchUp.finish(sending: nil) { payload in
            guard let other = MessageEventID.of(payload) else { return .deliver }
            if other == id { return .skip }
            return other > id ? .deliverAndStopFiltering : .deliver
        }
        try await reply(.error(.unconfirmed(id: id)))
    }

    private func reply(_ event: ServerEvent) async throws {
        try await connection.send(text: event.line)
    }

    private func publish(_ event: ServerEvent, to room: String, excludingSelf: Bool = false) async {
        await server.publish(text: event.line, to: RoomDirectory.topic(room), excluding: excludingSelf ? connection : nil)
    }
}
