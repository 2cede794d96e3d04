import Switchboard
import SwitchboardCore
import ChatRoomCore

/// Who is in which room. Joining checks the name and subscribes the connection to the room's
/// topic in one step, so a joiner never misses an event published after its presence snapshot.
actor RoomDirectory {
    private struct Member { var name: String; var connection: ObjectIdentifier }
    /// room → lower-cased user name → member, plus join order for presence.
    private var rooms: [String: [String: Member]] = [:]
    private var order: [String: [String]] = [:]
    private let server: WebSocketServer

    init(server: WebSocketServer) { self.server = server }

    static func topic(_ room: String) -> String { "room:" + room }

    /// Adds `user` to `room` and subscribes `connection`; returns the presence list (join order).
    func join(room: String, user: String, connection: WebSocketConnection) -> Result<[String], ChatError> {
        let key = user.lowercased()
        if rooms[room]?[key] != nil { return .failure(.nameTaken(user, room)) }
        rooms[room, default: [:]][key] = Member(name: user, connection: ObjectIdentifier(connection))
        order[room, default: []].append(key)
        server.subscribe(connection, to: Self.topic(room))
        return .success(users(in: room))
    }

    /// Removes `user` from `room` and unsubscribes `connection`.
    func leave(room: String, user: String, connection: WebSocketConnection) {
        let key = user.lowercased()
        guard rooms[room]?[key]?.connection == ObjectIdentifier(connection) else { return }
        rooms[room]?[key] = nil
        order[room]?.removeAll { $0 == key }
        if rooms[room]?.isEmpty == true { rooms[room] = nil; order[room] = nil }
        server.unsubscribe(connection, from: Self.topic(room))
    }

    /// Every member on this server: (room, user name).
    func members() -> [(room: String, user: String)] {
        rooms.flatMap { room, members in members.values.map { (room, $0.name) } }
    }

    func users(in room: String) -> [String] {
        (order[room] ?? []).compactMap { rooms[room]?[$0]?.name }
    }
}
