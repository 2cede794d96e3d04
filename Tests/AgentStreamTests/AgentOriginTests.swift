import Foundation
import Testing
import SwitchboardTestSupport

/// Cross-site WebSocket hijacking and DNS rebinding against `agent-stream serve`: a web page the
/// user visits must not drive a local agent (and answer its permission requests).
@Suite struct AgentOriginTests {
    private static let path = "/v1/ws?session_id=origin-test"

    @Test func foreignOriginIsRefusedByDefault() async throws {
        let server = try await AgentServerProcess()
        let host = "127.0.0.1:\(server.port)"
        let foreign = try await RawHTTP.exchange(port: server.port, RawHTTP.upgradeRequest(
            path: Self.path, host: host, origin: "https://evil.example"))
        #expect(foreign.status == 403, "\(foreign.head)")
        #expect(foreign.body.contains("origin_not_allowed"), "\(foreign.body)")
        let own = try await RawHTTP.exchange(port: server.port, RawHTTP.upgradeRequest(
            path: Self.path, host: host, origin: "http://\(host)"))
        #expect(own.status == 101, "\(own.head) \(own.body)")
        let program = try await RawHTTP.exchange(port: server.port, RawHTTP.upgradeRequest(
            path: "/v1/ws?session_id=origin-test-2", host: host, origin: nil))
        #expect(program.status == 101, "\(program.head) \(program.body)")
    }

    @Test func reboundHostNameIsRefused() async throws {
        let server = try await AgentServerProcess()
        let evil = "evil.example:\(server.port)"
        let upgrade = try await RawHTTP.exchange(port: server.port, RawHTTP.upgradeRequest(
            path: Self.path, host: evil, origin: "http://\(evil)"))
        #expect(upgrade.status == 403, "\(upgrade.head)")
        #expect(upgrade.body.contains("host_not_allowed"), "\(upgrade.body)")
        let noOrigin = try await RawHTTP.exchange(port: server.port, RawHTTP.upgradeRequest(
            path: Self.path, host: evil, origin: nil))
        #expect(noOrigin.status == 403, "\(noOrigin.head)")
    }

    @Test func allowOriginAddsAnOrigin() async throws {
        let server = try await AgentServerProcess(["--allow-origin", "https://app.example"])
        let host = "127.0.0.1:\(server.port)"
        let allowed = try await RawHTTP.exchange(port: server.port, RawHTTP.upgradeRequest(
            path: Self.path, host: host, origin: "https://app.example"))
        #expect(allowed.status == 101, "\(allowed.head)")
        let other = try await RawHTTP.exchange(port: server.port, RawHTTP.upgradeRequest(
            path: Self.path, host: host, origin: "https://evil.example"))
        #expect(other.status == 403, "\(other.head)")
    }

    /// Without distinct tokens, a client is its IP address: one address cannot own more than
    /// its cap of sessions while another still can.
    @Test func sessionsPerClientAreCountedByAddressWithoutTokens() async throws {
        let server = try await AgentServerProcess(["--max-sessions-per-client", "2"])
        let host = "127.0.0.1:\(server.port)"
        for session in ["a1", "a2"] {
            let reply = try await RawHTTP.exchange(port: server.port, RawHTTP.upgradeRequest(
                path: "/v1/ws?session_id=\(session)", host: host, origin: nil))
            #expect(reply.status == 101, "\(session): \(reply.head)")
        }
        let third = try await RawHTTP.exchange(port: server.port, RawHTTP.upgradeRequest(
            path: "/v1/ws?session_id=a3", host: host, origin: nil))
        #expect(third.status == 429, "\(third.head)")
        #expect(third.body.contains("too_many_sessions"), "\(third.body)")
        let otherAddress = try await RawHTTP.exchange(port: server.port, RawHTTP.upgradeRequest(
            path: "/v1/ws?session_id=b1", host: host, origin: nil), from: "127.0.0.2")
        #expect(otherAddress.status == 101, "\(otherAddress.head)")
    }
}
