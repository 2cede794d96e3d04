import Foundation
import Logging
import ExampleSupport
import Switchboard
import SwitchboardCore

/// Signed tokens (the JWT flags of ``TokenOptions``): the upgrade's authentication and the
/// `refresh` command's check, both by one `JWTAuthenticator`, whose key file SIGHUP reloads.
///
/// A plain value of closures, so that the server and its sessions compile without the
/// `JWTSupport` trait (the flags then exit 64 in `validate`, and there is none of this).
struct TokenAuthentication: Sendable {
    /// The route hook: `.accept(userInfo:expiresAt:)` with the token's claims (`sub`, `name`,
    /// …) and `exp`, or the `401` refusal.
    let authenticate: @Sendable (WebSocketUpgradeRequest) async -> WebSocketAuthDecision
    /// A `refresh` command's token check.
    let verifier: TokenVerifier

    /// The authenticator the flags describe (its key file read now, and again on SIGHUP), or
    /// nil when no key flag is given.
    static func make(_ options: TokenOptions) async throws -> TokenAuthentication? {
        #if JWTSupport
        guard let authenticator = try await options.makeAuthenticator() else { return nil }
        // To stderr with the server's other log lines (swift-log's default is stdout, whose
        // first line announces the port).
        options.reloadOnHangUp(authenticator, logger: Logger(label: "agent-stream", factory: { label in StreamLogHandler.standardError(label: label) }))
        return TokenAuthentication(authenticator)
        #else
        return nil
        #endif
    }

    #if JWTSupport
    init(_ authenticator: JWTAuthenticator) {
        authenticate = { request in await authenticator.authenticate(request) }
        verifier = TokenVerifier { token in
            do throws(JWTVerificationError) {
                let verified = try await authenticator.verify(token)
                return .valid(subject: verified.subject, expiresAt: verified.expiresAt)
            } catch {
                return .invalid(code: error.code, message: error.message)
            }
        }
    }
    #endif
}
