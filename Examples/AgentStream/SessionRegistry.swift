import Foundation
import Synchronization
import Switchboard
import SwitchboardCore

/// The server's sessions by id: a session outlives its connections for its grace period, and
/// only a client presenting the token it was opened with may take it over.
final class SessionRegistry: Sendable {
    private let sessions = Mutex<[String: AgentSession]>([:])
    private let make: @Sendable (_ id: String, _ identity: String?, _ registry: SessionRegistry) -> AgentSession

    init(make: @escaping @Sendable (_ id: String, _ identity: String?, _ registry: SessionRegistry) -> AgentSession) {
        self.make = make
    }

    /// Whether a client presenting `identity` may open or resume session `id`: a session that
    /// exists belongs to the token it was opened with (compared in constant time).
    func mayOpen(_ id: String, identity: String?) -> Bool {
        guard let session = sessions.withLock({ $0[id] }) else { return true }
        return Self.same(session.identity, identity)
    }

    /// The session `id`, made when absent (then `created` is true). Nil when it belongs to
    /// another identity.
    func session(_ id: String, identity: String?) -> (session: AgentSession, created: Bool)? {
        sessions.withLock { all in
            if let existing = all[id] {
                return Self.same(existing.identity, identity) ? (existing, false) : nil
            }
            let session = make(id, identity, self)
            all[id] = session
            return (session, true)
        }
    }

    /// Forgets `session` (its grace period ran out), unless another one took its id since.
    func remove(_ session: AgentSession) {
        sessions.withLock { all in
            if all[session.sessionID] === session { all[session.sessionID] = nil }
        }
    }

    var count: Int { sessions.withLock { $0.count } }

    private static func same(_ a: String?, _ b: String?) -> Bool {
        switch (a, b) {
        case (nil, nil): true
        case (let x?, let y?): ConstantTime.equals(x, y)
        default: false
        }
    }
}
