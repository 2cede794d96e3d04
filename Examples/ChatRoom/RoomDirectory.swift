import Switchboard
import SwitchboardCore
import ChatRoomCore

/// Who is in which room. Joining checks the name and subscribes the connection to the room's
/// topic in one step, so a joiner never misses an event published after its presence snapshot.
actor RoomDirectory {
    private struct Member { var name: String; var connection: WebSocketConnection; var rejoinKey: String; var owner: String? }
    /// room → lower-cased user name → member, plus join order for presence.
    private var rooms: [String: [String: Member]] = [:]
    private var order: [String: [String]] = [:]
    private let server: WebSocketServer

    init(server: WebSocketServer) { self.server = server }

    static func topic(_ room: String) -> String { "room:" + room }

    /// The room of a room topic (nil for another topic).
    static func room(ofTopic topic: String) -> String? {
        topic.hasPrefix("room:") ? String(topic.dropFirst("room:".count)) : nil
    }

    /// The connections of this server's members of `room`.
    func connections(in room: String) -> [WebSocketConnection] {
        (rooms[room] ?? [:]).values.map(\.connection)
    }

    /// Adds `user` to `room` with the claim's new key and subscribes `connection`; returns the
    /// presence list (join order), whether the name was already present, and the key. A name
    /// held by another connection is taken over only when the claim carries its key (a re-join
    /// after a reconnect, compared in constant time) or the same token subject (`owner`): that
    /// connection leaves the room's topic
    /// and keeps no membership, the user keeps its place in the list, and the key is kept.
    /// Otherwise `name_taken`: the holder keeps the name and receives everything as before.
    func join(room: String, user: String, connection: WebSocketConnection,
              claim: PresenceClaim) -> Result<JoinedPresence, ChatError> {
        let key = user.lowercased()
        var replaced = false
        var rejoinKey = claim.newKey
        if let current = rooms[room]?[key] {
            let sameOwner = claim.owner != nil && claim.owner == current.owner
            guard current.connection !== connection, sameOwner || RejoinKey.matches(claim.rejoinKey, current.rejoinKey) else {
                return .failure(.nameTaken(user, room))
            }
            server.unsubscribe(current.connection, from: Self.topic(room))
            replaced = true
            rejoinKey = current.rejoinKey
        } else {
            order[room, default: []].append(key)
        }
        rooms[room, default: [:]][key] = Member(name: user, connection: connection, rejoinKey: rejoinKey,
                                                 owner: claim.owner)
        server.subscribe(connection, to: Self.topic(room))
        return .success(JoinedPresence(users: users(in: room), replaced: replaced, rejoinKey: rejoinKey))
    }

    /// Removes `user` from `room` and unsubscribes `connection`; false (nothing done) when the
    /// name is not this connection's (a re-join took it over).
    @discardableResult
    func leave(room: String, user: String, connection: WebSocketConnection) -> Bool {
        let key = user.lowercased()
        guard rooms[room]?[key]?.connection === connection else {
            server.unsubscribe(connection, from: Self.topic(room))
            return false
        }
        rooms[room]?[key] = nil
        order[room]?.removeAll { $0 == key }
        if rooms[room]?.isEmpty == true { rooms[room] = nil; order[room] = nil }
        server.unsubscribe(connection, from: Self.topic(room))
        return true
    }

    /// Every member on this server: (room, user name, key of its presence, token subject).
    func members() -> [(room: String, user: String, rejoinKey: String, owner: String?)] {
        rooms.flatMap { room, members in members.values.map { (room, $0.name, $0.rejoinKey, $0.owner) } }
    }

    func users(in room: String) -> [String] {
        (order[room] ?? []).compactMap { rooms[room]?[$0]?.name }
    }
}
