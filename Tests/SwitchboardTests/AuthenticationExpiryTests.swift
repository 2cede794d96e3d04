import Foundation
import Testing
@testable import Switchboard
import SwitchboardCore
import SwitchboardTestSupport

/// `.accept(userInfo:expiresAt:)`: the server closes a connection with 4001 "token expired"
/// when its authentication deadline passes, on task and callback routes alike;
/// `extendAuthentication(until:)` moves the deadline later (never earlier); a connection
/// accepted without an expiry is never closed for it.
@Suite(.timeLimit(.minutes(6)))
struct AuthenticationExpiryTests {
    /// Token lifetimes run on the wall clock: each test starts once the process is responsive
    /// (not while the whole suite is starting at once), with lifetimes sized for the load.
    init() async { await MachineLoad.waitUntilResponsive() }

    /// A short token lifetime: long enough for the upgrade and a first exchange to get through
    /// before it ends, on a loaded machine too (the whole suite runs in parallel on 2 cores:
    /// 300 ms was not always enough there; under ThreadSanitizer everything is 5-10x slower).
    static var short: Duration { TestEnvironment.lifetime(.seconds(2), tsan: .seconds(10)) }

    /// Connects with `token` (no token provider: the endpoint's own header), and returns the
    /// lines received until the server closed, the close status, and when the close came.
    private func connectUntilClosed(_ server: ExpiringTokenServer, token: SocketToken,
                                    sending commands: [String] = []) async throws
        -> (lines: [String], status: WebSocketCloseStatus?, closedAt: Date) {
        let adapter = SocketAdapter()
        let lines = try await adapter.connect(to: try server.endpoint(headers: [("Authorization", "Bearer \(token.value)")]))
        for command in commands { try await adapter.send(text: command + "\n") }
        var received: [String] = []
        for await line in lines { received.append(String(decoding: line, as: UTF8.self)) }
        let closedAt = Date()
        return (received, await adapter.closeStatus, closedAt)
    }

    @Test(arguments: [ExpiringTokenServer.Style.task, .callbacks])
    func theServerClosesWith4001WhenTheTokenExpires(style: ExpiringTokenServer.Style) async throws {
        let server = try await ExpiringTokenServer(style: style)
        let token = server.issue(lifetime: Self.short)
        let expiresAt = try #require(token.expiresAt)
        // Nothing sent: under ThreadSanitizer, with the whole suite in parallel on 2 cores, the
        // upgrade alone took seconds, and a send could meet the close (what is checked here).
        let result = try await connectUntilClosed(server, token: token)
        #expect(result.lines.isEmpty)
        #expect(result.status?.code == .tokenExpired)
        #expect(result.status?.reason == "token expired")
        #expect(result.closedAt >= expiresAt, "closed before the token expired")
        #expect(await serverEventually { server.closeCodes == [4001] }, "\(server.closeCodes)")
        #expect(server.openDeadlines == [expiresAt])
        await server.stop()
    }

    /// In-band: a refresh with a token expiring earlier than the current deadline leaves it
    /// (a replayed old token cannot shorten the connection), one expiring later moves it; the
    /// connection outlives its first deadline and is closed at the new one.
    @Test(arguments: [ExpiringTokenServer.Style.task, .callbacks])
    func aRefreshMovesTheDeadlineLaterNeverEarlier(style: ExpiringTokenServer.Style) async throws {
        let server = try await ExpiringTokenServer(style: style)
        // The first lifetime only has to cover the connect and the first commands; `earlier`
        // must still be valid when its refresh arrives (under ThreadSanitizer, with the suite in
        // parallel, that took over a second: it was refused as expired), yet end before `first`.
        // One load factor for the three, so that their order holds.
        let load = MachineLoad.factor
        let first = server.issue(lifetime: TestEnvironment.lifetime(.seconds(2), tsan: .seconds(16), load: load))
        let earlier = server.issue(lifetime: TestEnvironment.lifetime(.seconds(1), tsan: .seconds(12), load: load))
        let later = server.issue(lifetime: TestEnvironment.lifetime(.milliseconds(2600), tsan: .seconds(18), load: load))
        let firstDeadline = try #require(first.expiresAt)
        let laterDeadline = try #require(later.expiresAt)
        func ms(_ d: Date) -> String { "\(Int64(d.timeIntervalSince1970 * 1000))" }
        let result = try await connectUntilClosed(server, token: first, sending: [
            "refresh \(earlier.value)", "deadline", "refresh \(later.value)", "deadline",
        ])
        #expect(result.lines == ["refreshed", "deadline \(ms(firstDeadline))", "refreshed", "deadline \(ms(laterDeadline))"])
        #expect(result.status?.code == .tokenExpired)
        #expect(result.closedAt >= laterDeadline, "closed before the extended deadline")
        #expect(server.refreshTokens == [earlier.value, later.value])
        #expect(await serverEventually { server.closeCodes == [4001] }, "\(server.closeCodes)")
        await server.stop()
    }

    /// Without `expiresAt` nothing closes the connection: it stays open (and answers) after a
    /// connection accepted at the same time with an expiry was closed at its deadline. An
    /// extension then gives it a deadline, which closes it.
    @Test(arguments: [ExpiringTokenServer.Style.task, .callbacks])
    func aConnectionWithoutExpiryIsNotClosedUntilAnExtensionGivesItOne(style: ExpiringTokenServer.Style) async throws {
        let server = try await ExpiringTokenServer(style: style)
        let forever = server.issue(lifetime: nil)
        let adapter = SocketAdapter()
        let lines = try await adapter.connect(to: try server.endpoint(headers: [("Authorization", "Bearer \(forever.value)")]))
        var iterator = lines.makeAsyncIterator()
        try await adapter.send(text: "deadline\n")
        #expect(await iterator.next().map { String(decoding: $0, as: UTF8.self) } == "deadline none")

        let short = server.issue(lifetime: Self.short)
        let expired = try await connectUntilClosed(server, token: short)
        #expect(expired.status?.code == .tokenExpired)

        try await adapter.send(text: "still there?\n")
        #expect(await iterator.next().map { String(decoding: $0, as: UTF8.self) } == "echo still there?")
        #expect(await adapter.currentConnection?.isOpen == true)

        let deadline = server.issue(lifetime: Self.short)
        try await adapter.send(text: "refresh \(deadline.value)\n")
        #expect(await iterator.next().map { String(decoding: $0, as: UTF8.self) } == "refreshed")
        #expect(await iterator.next() == nil)
        #expect(await adapter.closeStatus?.code == .tokenExpired)
        #expect(Date() >= deadline.expiresAt ?? .distantFuture)
        #expect(server.openDeadlines == [nil, short.expiresAt])
        #expect(await serverEventually { server.closeCodes.sorted() == [4001, 4001] }, "\(server.closeCodes)")
        await server.stop()
    }

    /// The deadline's timer holds its connection only until the connection closes: a
    /// connection closed long before its deadline is freed at once, not when the timer would
    /// have fired.
    @Test(arguments: [ExpiringTokenServer.Style.task, .callbacks])
    func aConnectionClosedBeforeItsDeadlineIsReleased(style: ExpiringTokenServer.Style) async throws {
        struct WeakConnection { weak var value: WebSocketConnection? }
        let weak = TestLock(WeakConnection())
        let server = try await ExpiringTokenServer(style: style, onOpen: { connection in
            weak.withLock { $0.value = connection }
        })
        let token = server.issue(lifetime: .seconds(600))
        let adapter = SocketAdapter()
        let lines = try await adapter.connect(to: try server.endpoint(headers: [("Authorization", "Bearer \(token.value)")]))
        try await adapter.send(text: "deadline\n")
        var iterator = lines.makeAsyncIterator()
        #expect(await iterator.next() != nil)
        await adapter.close()
        #expect(await serverEventually { server.closeCodes == [1000] }, "\(server.closeCodes)")
        #expect(await serverEventually { weak.withLock { $0.value == nil } }, "the closed connection is still referenced")
        await server.stop()
    }
}
