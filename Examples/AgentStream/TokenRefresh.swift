import Foundation
import SwitchboardChannel

/// What a token presented in a `refresh` command verified to, or why it did not.
enum TokenCheck: Sendable, Equatable {
    /// A valid token: its subject (`sub`) and expiry (`exp`; nil: none).
    case valid(subject: String, expiresAt: Date?)
    /// Refused: what was wrong (the verifier's error code and message; never the token).
    case invalid(code: String, message: String)
}

/// Checks the token of a `refresh` command: the server's JWT authenticator behind a closure,
/// so that a session does not depend on the `JWTSupport` trait (without it, or without a key
/// flag, a server has no verifier and refuses `refresh`).
struct TokenVerifier: Sendable {
    let check: @Sendable (_ token: String) async -> TokenCheck
}

/// The agent protocol's `refresh` command, `{"type":"refresh","data":{"token":"…"}}`: a new
/// token for the connection that sends it, before its current one expires.
enum RefreshCommand: Equatable {
    /// A well-formed refresh with its token.
    case refresh(token: String)
    /// A `refresh` without a string `data.token`.
    case malformed(reason: String)

    /// The refresh in `line`, or nil when the line is not a `refresh` command (checked only for
    /// lines that are no other command, so ordinary commands are parsed once).
    init?(line: Data) {
        guard let value = try? JSONValue(parsing: line), value["type"]?.stringValue == "refresh" else { return nil }
        guard let token = value["data"]?["token"]?.stringValue, !token.isEmpty else {
            self = .malformed(reason: "refresh: missing data.token")
            return
        }
        self = .refresh(token: token)
    }
}
