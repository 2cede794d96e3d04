import Switchboard
import SwitchboardCore

/// The chat's client→server commands, each sent as one compact JSON line (`JSONSocketCommand`).
/// Shared with the test target (symlinked into Tests/ChatRoomTests/Shared).
package enum ChatCommand: JSONSocketCommand, Equatable {
    /// `since`: the last message id seen in the room (a re-join after a reconnect);
    /// `rejoinKey`: the key of the `presence` that answered the earlier join of the room.
    /// `user`: nil on a server with tokens (the server takes the token's display name).
    case join(room: String, user: String?, since: Int64? = nil, rejoinKey: String? = nil)
    /// `clientID`: an id of the sender's choosing (1 to 64 characters) that makes a retry safe:
    /// the same id in the same room within 10 minutes is stored and broadcast once.
    case message(room: String, text: String, clientID: String? = nil)
    case leave(room: String)
    case typing(room: String, isTyping: Bool)
    /// A new token for the open connection (servers with tokens): answered by `refreshed`.
    case refresh(token: String)
    /// A page of a joined room's history: messages below `before` (nil: the newest), at most
    /// `limit` (nil: the server's default, 50). Answered by `history` with `next`.
    case history(room: String, before: Int64? = nil, limit: Int? = nil)

    private enum Key: String, CodingKey { case type, room, user, since, rejoinKey, text, isTyping, token, before, limit
        case clientID = "client_id"
    }

    package func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Key.self)
        switch self {
        case .join(let room, let user, let since, let rejoinKey):
            try c.encode("join", forKey: .type); try c.encode(room, forKey: .room); try c.encodeIfPresent(user, forKey: .user)
            try c.encodeIfPresent(since, forKey: .since); try c.encodeIfPresent(rejoinKey, forKey: .rejoinKey)
        case .message(let room, let text, let clientID):
            try c.encode("message", forKey: .type); try c.encode(room, forKey: .room); try c.encode(text, forKey: .text)
            try c.encodeIfPresent(clientID, forKey: .clientID)
        case .leave(let room):
            try c.encode("leave", forKey: .type); try c.encode(room, forKey: .room)
        case .typing(let room, let isTyping):
            try c.encode("typing", forKey: .type); try c.encode(room, forKey: .room); try c.encode(isTyping, forKey: .isTyping)
        case .refresh(let token):
            try c.encode("refresh", forKey: .type); try c.encode(token, forKey: .token)
        case .history(let room, let before, let limit):
            try c.encode("history", forKey: .type); try c.encode(room, forKey: .room)
            try c.encodeIfPresent(before, forKey: .before); try c.encodeIfPresent(limit, forKey: .limit)
        }
    }
}

/// Where the chat server is: a `ws://` / `wss://` URL plus an optional bearer token (sent as
/// `Authorization: Bearer …`). Shared with the test target.
package struct ChatEndpoint: SocketEndpoint {
    private let base: WebSocketURLEndpoint

    package init(url: String, token: String? = nil, tls: TLSConfiguration = .default,
                 proxy: ProxyConfiguration = .none) throws(SwitchboardError) {
        base = try WebSocketURLEndpoint(url: url, headers: token.map { [("Authorization", "Bearer \($0)")] } ?? [],
                                        tls: tls, proxy: proxy)
    }

    package var scheme: SocketScheme { base.scheme }
    package var host: String { base.host }
    package var port: Int { base.port }
    package var path: String { base.path }
    package var headers: [(name: String, value: String)] { base.headers }
    package var tls: TLSConfiguration { base.tls }
    package var proxy: ProxyConfiguration { base.proxy }
}
