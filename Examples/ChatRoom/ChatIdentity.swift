import ChatRoomCore
import Foundation

/// Who a connection is, on a server with tokens: the token's subject (`sub`, the identity its
/// presences are keyed by), its display name (the `name` claim, else `sub`) and the rooms its
/// `rooms` claim allows. Read from the connection's `userInfo`, which only the route's token
/// authenticator fills; nil on a server without tokens (the client names itself).
struct ChatIdentity: Sendable, Equatable {
    var subject: String
    var name: String
    var rooms: RoomPatterns

    init(subject: String, name: String, rooms: RoomPatterns = .any) {
        self.subject = subject; self.name = name; self.rooms = rooms
    }

    /// From the verified token's `userInfo` (keys `sub`, `name`, `rooms`); nil without `sub`.
    init?(userInfo: [String: String]) {
        guard let subject = userInfo["sub"], !subject.isEmpty else { return nil }
        self.init(subject: subject, name: userInfo["name"] ?? subject, rooms: RoomPatterns(claim: userInfo["rooms"]))
    }
}

/// A new token presented by `refresh`, verified.
struct RefreshedToken: Sendable, Equatable {
    /// Its `sub`: it must be the connection's.
    var subject: String
    /// Its `exp` (nil: the token does not expire).
    var expiresAt: Date?
}

/// Verifies the token of a `refresh` (the server's token authenticator, with its keys, issuer,
/// audience and leeway); the failure is the `error` to send (`invalid_token`).
typealias RefreshVerifier = @Sendable (String) async -> Result<RefreshedToken, ChatError>
