#if JWTSupport
import Foundation
import Logging
import Switchboard
import SwitchboardCore
import SwitchboardTestSupport
import Testing

/// `JWTAuthenticator.authenticate` as a real server's hook: a good token (header or `token`
/// query item) upgrades with the identity in `userInfo` and the token's `exp` as the
/// connection's deadline; a bad one gets `401` with the JSON error body and its code; the
/// query token never reaches the server's log.
@Suite struct JWTRouteTests {
    /// Runs a server whose `/jwt` route answers each connection with one line:
    /// `sub|name|rooms|authenticationExpiresAt`.
    private func withJWTServer(_ body: (_ port: Int, _ log: TestLock<[String]>) async throws -> Void) async throws {
        let log = TestLock<[String]>([])
        let server = WebSocketServer(configuration: .init(host: "127.0.0.1", port: 0),
                                     logger: Logger(label: "jwt.route") { _ in ComponentLoggingTests.CapturingLogHandler(records: log) })
        let authenticator = try await JWTAuthenticator(keys: .secret(Array(JWTTestKeys.secret.utf8)))
        server.route("/jwt", authenticate: authenticator.authenticate) { connection in
            let expiry = connection.authenticationExpiresAt.map { "\(Int($0.timeIntervalSince1970))" } ?? "none"
            let line = [connection.userInfo["sub"] ?? "?", connection.userInfo["name"] ?? "?",
                        connection.userInfo["rooms"] ?? "?", expiry].joined(separator: "|")
            try await connection.send(text: line + "\n")
            for await _ in connection.messages() {}
        }
        let port = try await server.start()
        do {
            try await body(port, log)
        } catch {
            await server.shutdown()
            throw error
        }
        await server.shutdown()
    }

    /// The first line the server sends a client connecting with `endpoint`.
    private func firstLine(_ endpoint: WebSocketURLEndpoint) async throws -> String? {
        let client = SocketAdapter()
        let lines = try await client.connect(to: endpoint)
        var first: String?
        for await line in lines {
            first = String(decoding: line, as: UTF8.self)
            break
        }
        await client.close()
        return first
    }

    @Test func goodTokenUpgradesWithItsIdentityByHeaderAndByQuery() async throws {
        let exp = TestTokens.unixTime(Date()) + 600
        let token = TestTokens.hs256(secret: JWTTestKeys.secret, claims: ["sub": "u-7", "name": "Dana", "exp": exp, "rooms": ["a", "b*"]])
        try await withJWTServer { port, log in
            let byHeader = try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/jwt", headers: [("Authorization", "Bearer \(token)")])
            #expect(try await firstLine(byHeader) == #"u-7|Dana|["a","b*"]|\#(exp)"#)
            let byQuery = try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/jwt?token=\(token)")
            #expect(try await firstLine(byQuery) == #"u-7|Dana|["a","b*"]|\#(exp)"#)
            // A token without exp sets no deadline.
            let forever = TestTokens.hs256(secret: JWTTestKeys.secret, claims: ["sub": "u-8"])
            let noExpiry = try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/jwt?token=\(forever)")
            #expect(try await firstLine(noExpiry) == "u-8|u-8|?|none")
            let lines = log.withLock { $0 }
            #expect(lines.contains { $0.contains("connection open") })
            for line in lines {
                #expect(!line.contains(token) && !line.contains(forever), "token in a log line: \(line)")
            }
        }
    }

    @Test func badTokensGet401WithTheJSONErrorBody() async throws {
        let now = TestTokens.unixTime(Date())
        let expired = TestTokens.hs256(secret: JWTTestKeys.secret, claims: ["sub": "u-7", "exp": now - 60])
        let forged = TestTokens.hs256(secret: "not-the-secret", claims: ["sub": "u-7", "exp": now + 60])
        let unsigned = TestTokens.base64URL(Array(#"{"alg":"none"}"#.utf8)) + "."
            + TestTokens.base64URL(Array(#"{"sub":"admin"}"#.utf8)) + "."
        try await withJWTServer { port, log in
            let cases: [(String, [String], String)] = [
                ("/jwt?token=\(expired)", [], "token_expired"),
                ("/jwt", ["Authorization: Bearer \(forged)"], "invalid_token"),
                ("/jwt?token=\(unsigned)", [], "invalid_token"),
                ("/jwt", [], "invalid_token"),
                ("/jwt?token=", [], "invalid_token"),
            ]
            for (path, extra, code) in cases {
                let reply = try await RawHTTP.exchange(port: port, RawHTTP.upgradeRequest(path: path, host: "127.0.0.1:\(port)",
                                                                                         origin: nil, extra: extra))
                #expect(reply.status == 401, "\(path) \(extra): \(reply.status) \(reply.body)")
                let top = try #require(try JSONSerialization.jsonObject(with: Data(reply.body.utf8)) as? [String: Any], "\(reply.body)")
                let error = try #require(top["error"] as? [String: Any])
                #expect(error["code"] as? String == code, "\(path): \(reply.body)")
                #expect(error["type"] as? String == "authentication_error")
                for secret in [expired, forged, unsigned] { #expect(!reply.body.contains(secret)) }
            }
            for line in log.withLock({ $0 }) {
                for secret in [expired, forged, unsigned] { #expect(!line.contains(secret), "token in a log line: \(line)") }
            }
        }
    }
}

#endif
