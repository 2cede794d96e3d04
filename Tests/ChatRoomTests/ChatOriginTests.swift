import Foundation
import Testing
import SwitchboardTestSupport

/// Cross-site WebSocket hijacking and DNS rebinding against `chat-room serve`: a page of another
/// site, or a page whose name was re-pointed at 127.0.0.1, cannot join rooms as the user; the
/// server's own page and programs (no `Origin`) can.
@Suite struct ChatOriginTests {
    private static func start(_ extra: [String] = []) async throws -> ChatServerProcess {
        try await ChatServerProcess(db: try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite"),
                                    extraArguments: extra)
    }


    @Test func foreignOriginIsRefusedByDefault() async throws {
        let server = try await Self.start()
        defer { server.child.signal(SIGKILL) }
        let host = "127.0.0.1:\(server.port)"
        let foreign = try await RawHTTP.exchange(port: server.port, RawHTTP.upgradeRequest(
            path: "/v1/ws", host: host, origin: "https://evil.example"))
        #expect(foreign.status == 403, "\(foreign.head)")
        #expect(foreign.body.contains("origin_not_allowed"), "\(foreign.body)")
        // Its own page (same scheme, host and port) and programs without an Origin get in.
        let own = try await RawHTTP.exchange(port: server.port, RawHTTP.upgradeRequest(
            path: "/v1/ws", host: host, origin: "http://\(host)"))
        #expect(own.status == 101, "\(own.head) \(own.body)")
        let program = try await RawHTTP.exchange(port: server.port, RawHTTP.upgradeRequest(
            path: "/v1/ws", host: host, origin: nil))
        #expect(program.status == 101, "\(program.head) \(program.body)")
        #expect(await server.stop() == 0)
    }

    @Test func reboundHostNameIsRefused() async throws {
        let server = try await Self.start()
        defer { server.child.signal(SIGKILL) }
        let evil = "evil.example:\(server.port)"
        let upgrade = try await RawHTTP.exchange(port: server.port, RawHTTP.upgradeRequest(
            path: "/v1/ws", host: evil, origin: "http://\(evil)"))
        #expect(upgrade.status == 403, "\(upgrade.head)")
        #expect(upgrade.body.contains("host_not_allowed"), "\(upgrade.body)")
        let page = try await RawHTTP.exchange(port: server.port, "GET / HTTP/1.1\r\nHost: \(evil)\r\n\r\n")
        #expect(page.status == 403, "\(page.head)")
        let ownPage = try await RawHTTP.exchange(port: server.port, "GET / HTTP/1.1\r\nHost: localhost:\(server.port)\r\n\r\n")
        #expect(ownPage.status == 200, "\(ownPage.head)")
        #expect(await server.stop() == 0)
    }

    @Test func allowOriginAddsAnOrigin() async throws {
        let server = try await Self.start(["--allow-origin", "https://app.example", "--allow-origin", "https://b.example"])
        defer { server.child.signal(SIGKILL) }
        let host = "127.0.0.1:\(server.port)"
        for origin in ["https://app.example", "https://b.example", "http://\(host)"] {
            let allowed = try await RawHTTP.exchange(port: server.port, RawHTTP.upgradeRequest(
                path: "/v1/ws", host: host, origin: origin))
            #expect(allowed.status == 101, "\(origin): \(allowed.head)")
        }
        let other = try await RawHTTP.exchange(port: server.port, RawHTTP.upgradeRequest(
            path: "/v1/ws", host: host, origin: "https://evil.example"))
        #expect(other.status == 403, "\(other.head)")
        #expect(await server.stop() == 0)
    }

    @Test func oneAddressCannotHoldMoreThanItsCap() async throws {
        let server = try await Self.start(["--max-connections-per-address", "2"])
        defer { server.child.signal(SIGKILL) }
        let alice = try await TestPeer.connect("alice", url: server.wsURL)
        let bob = try await TestPeer.connect("bob", url: server.wsURL)
        let third = try await RawHTTP.exchange(port: server.port, RawHTTP.upgradeRequest(
            path: "/v1/ws", host: "127.0.0.1:\(server.port)", origin: nil))
        #expect(third.status == 429, "\(third.head)")
        #expect(third.body.contains("too_many_connections"), "\(third.body)")
        await alice.close()
        await bob.close()
        #expect(await server.stop() == 0)
    }
}
