#if JWTSupport
import Foundation
import SwitchboardTestSupport
import Testing

/// The chat-room HTTP API with the token flags (`--jwt-secret-file`, no `--api-key-file`): a JWT
/// that verifies and grants `publish` (in `scope` or `scopes`) may post; one without the scope
/// gets 403, a forged one 401. (APIAccessTests checks the same rules in-process in every build.)
@Suite(.serialized, .timeLimit(.minutes(5)))
struct ChatAPITokenTests {
    @Test func aTokenNeedsThePublishScope() async throws {
        let server = try await ChatServerProcess(db: try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite"),
                                                 extraArguments: ["--jwt-secret-file", try ChatTokenTests.secretFile()])
        defer { server.child.signal(SIGKILL) }
        let exp = TestTokens.unixTime(Date() + 600)
        func token(_ extra: [String: Any], secret: String = ChatTokenTests.secret) -> String {
            var claims: [String: Any] = ["sub": "svc", "exp": exp]
            claims.merge(extra) { $1 }
            return TestTokens.hs256(secret: secret, claims: claims)
        }
        let url = "\(server.httpURL)v1/rooms/lobby/messages"
        let body = #"{"user":"svc","text":"hi"}"#

        let spaceSeparated = try await APIClients.python("POST", url, key: token(["scope": "read publish"]), body: body)
        #expect(spaceSeparated.status == 200, "\(spaceSeparated)")
        let array = try await APIClients.python("POST", url, key: token(["scopes": ["read", "publish"]]), body: body)
        #expect(array.status == 200, "\(array)")
        let page = try await APIClients.python("GET", url, key: token(["scope": "publish"]))
        #expect(page.status == 200 && (page.json["messages"] as? [Any])?.count == 2, "\(page)")

        let readOnly = try await APIClients.python("POST", url, key: token(["scope": "read publisher"]), body: body)
        #expect(readOnly.status == 403 && readOnly.errorCode == "insufficient_scope", "\(readOnly)")
        let forged = try await APIClients.python("POST", url, key: token(["scope": "publish"], secret: String(repeating: "f", count: 64)),
                                                 body: body)
        #expect(forged.status == 401 && forged.errorType == "authentication_error", "\(forged)")
        let none = try await APIClients.python("POST", url, body: body)
        #expect(none.status == 401, "\(none)")
        // Without --api-key-file, /metrics is open (counters only).
        #expect(try await APIClients.python("GET", "\(server.httpURL)metrics").status == 200)
    }
}
#endif
