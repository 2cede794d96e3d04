import Foundation
import Testing
import SwitchboardChannel
import Switchboard
import SwitchboardCore
import SwitchboardTestSupport

/// The channel's side of token refresh: the `refresh` command line, the unnumbered `system`
/// event `refreshed`, and a `Channel` with a token provider that refreshes in-band against a
/// fake agent server whose tokens expire.
@Suite("Channel token refresh", .timeLimit(.minutes(10)))
struct ChannelTokenRefreshTests {
    /// Token lifetimes run on the wall clock: each test starts once the process is responsive
    /// (not while the whole suite is starting at once), with lifetimes sized for the load.
    init() async { await MachineLoad.waitUntilResponsive() }

    @Test func theRefreshCommandIsOneJSONLine() throws {
        #expect(ChannelCommand.refreshLine(token: "a\"b") == #"{"type":"refresh","data":{"token":"a\"b"}}"#)
    }

    @Test func theRefreshedEventDecodesWithItsExpiry() {
        let line = #"{"type":"system","data":{"subtype":"refreshed","exp":1764000000,"message":"token refreshed"}}"#
        #expect(ChannelEvent(line: line) == .refreshed(expiresAt: Date(timeIntervalSince1970: 1_764_000_000)))
        #expect(ChannelEvent(line: #"{"type":"system","data":{"subtype":"refreshed"}}"#) == .refreshed(expiresAt: nil))
        // An exp that is not a sane number is dropped, not trusted nor fatal.
        #expect(ChannelEvent(line: #"{"type":"system","data":{"subtype":"refreshed","exp":1e300}}"#) == .refreshed(expiresAt: nil))
        #expect(ChannelEvent(line: #"{"type":"system","data":{"subtype":"refreshed","exp":"soon"}}"#) == .refreshed(expiresAt: nil))
        let event = ChannelEvent.refreshed(expiresAt: Date(timeIntervalSince1970: 1_764_000_000.7))
        #expect(event.type == "system")
        #expect(event.jsonLine == #"{"type":"system","data":{"subtype":"refreshed","exp":1764000000,"message":"token refreshed"}}"#)
        #expect(ChannelEvent(line: event.jsonLine) == .refreshed(expiresAt: Date(timeIntervalSince1970: 1_764_000_000)))
    }

    /// A channel with a token provider stays connected across three expiries: at 80% of each
    /// token's lifetime it sends `{"type":"refresh","data":{"token":…}}` with a new token, the
    /// server extends the connection and answers `refreshed`, which is delivered without
    /// moving the channel's sequence position.
    @Test func aChannelWithATokenProviderStaysConnectedAcrossThreeExpiries() async throws {
        let server = try await FakeAgentServer()
        // Each token is declared to the channel as expiring halfway through the lifetime the
        // server gives it: the channel refreshes at 80% of the declared half, 40% of the real
        // lifetime, leaving 60% of it (not 20%) for a refresh to get through on a loaded machine
        // (the whole suite runs in parallel; a fresh-clone run saw a 0.3 s margin missed). The
        // server still closes a connection at its token's real expiry.
        let lifetime: TimeInterval = (underThreadSanitizer ? 20 : 3) * MachineLoad.factor
        let endpoint = try ChannelEndpoint(baseURL: "ws://127.0.0.1:\(server.port)", sessionID: "s1", token: "stale")
        let provider: @Sendable () async throws -> SocketToken = { server.issue(lifetime: lifetime, declared: 0.5) }
        let refreshed = try await withChannel(endpoint, tokenProvider: provider) { channel in
            try await channel.send(.message(content: "hi"))
            var refreshed: [Date?] = []
            for await event in channel.events {
                if case .refreshed(let expiresAt) = event { refreshed.append(expiresAt) }
                if refreshed.count == 4 { break }
            }
            #expect(channel.lastSequence == 1, "the numbered answer moved it; refreshed did not")
            // The third token's real deadline passes with the connection open.
            let third = server.state.withLock { $0.issued.dropFirst(2).first }
            if let deadline = third.flatMap(server.expiry(of:)) {
                while Date() < deadline.addingTimeInterval(0.2) { try await Task.sleep(for: .milliseconds(50)) }
            }
            return refreshed
        }
        let issued = server.state.withLock { $0.issued }
        // Five: the upgrade's and four refreshes' (more may have followed while the third
        // token's deadline passed).
        try #require(issued.count >= 5)   // indexed below: a short count must not crash the test process
        #expect(Date() > server.expiry(of: issued[2]) ?? .distantFuture, "three tokens' deadlines have passed")
        #expect(server.state.withLock { $0.upgradeTokens } == [issued[0].value], "one connection, the provider's token")
        #expect(Array(server.state.withLock { $0.refreshTokens }.prefix(4)) == issued[1...4].map(\.value))
        #expect(refreshed == issued[1...4].map { server.expiry(of: $0).map { Date(timeIntervalSince1970: $0.timeIntervalSince1970.rounded(.down)) } })
        #expect(await eventually { server.state.withLock { $0.closeCodes } == [1000] })
        await server.stop()
    }
}

/// Whether this process runs under ThreadSanitizer (everything 5-10x slower): its runtime
/// exports `__tsan_init`.
let underThreadSanitizer: Bool = {
    guard let main = dlopen(nil, RTLD_NOW) else { return false }
    return dlsym(main, "__tsan_init") != nil
}()

/// Polls `condition` until it holds; false after a minute (which only ends a failing run).
func eventually(_ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + .seconds(60)
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return condition()
}

/// A value behind a lock (this test target does not depend on the shared test support).
final class Guarded<State>: @unchecked Sendable {
    // Safety: `state` is only touched while `lock` is held.
    private var state: State
    private let lock = NSLock()
    init(_ state: State) { self.state = state }
    func withLock<R>(_ body: (inout State) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&state)
    }
}

/// Just enough of an agent server: tokens `tok-N` valid until the expiry they were issued
/// with, a `message` answered by one numbered `partial`, a `refresh` with a valid token
/// extending the connection and answered by an unnumbered `refreshed`.
final class FakeAgentServer: Sendable {
    struct State {
        var expiries: [String: Date] = [:]
        var issued: [SocketToken] = []
        var upgradeTokens: [String] = []
        var refreshTokens: [String] = []
        var closeCodes: [UInt16] = []
    }

    let server: WebSocketServer
    let port: Int
    let state = Guarded(State())

    init() async throws {
        server = WebSocketServer(configuration: .init(host: "127.0.0.1", port: 0))
        let state = self.state
        server.route(ChannelEndpoint.channelPath, authenticate: { request in
            let token = request.bearerToken ?? ""
            let expiry = state.withLock { s in
                s.upgradeTokens.append(token)
                return s.expiries[token]
            }
            guard let expiry, expiry > Date() else { return .unauthorized() }
            return .accept(userInfo: ["sub": "alice"], expiresAt: expiry)
        }) { connection in
            var seq = 0
            for await line in connection.lines() {
                guard let object = try? JSONSerialization.jsonObject(with: line) as? [String: Any],
                      let type = object["type"] as? String else { continue }
                let data = object["data"] as? [String: Any] ?? [:]
                switch type {
                case "message":
                    seq += 1
                    try? await connection.send(text: #"{"type":"partial","data":{"text":"hello"},"seq":\#(seq)}"# + "\n")
                case "refresh":
                    let token = data["token"] as? String ?? ""
                    let expiry = state.withLock { s in
                        s.refreshTokens.append(token)
                        return s.expiries[token]
                    }
                    guard let expiry, expiry > Date() else { continue }
                    connection.extendAuthentication(until: expiry)
                    try? await connection.send(text: ChannelEvent.refreshed(expiresAt: expiry).jsonLine + "\n")
                default:
                    continue
                }
            }
            let code = connection.closeStatus?.code.rawValue ?? 0
            state.withLock { $0.closeCodes.append(code) }
        }
        port = try await server.start()
    }

    /// A token the server accepts for `lifetime` from now, declared to the client as expiring
    /// after `declared` of that lifetime (1: its real expiry).
    func issue(lifetime: TimeInterval, declared: Double = 1) -> SocketToken {
        state.withLock { s in
            let now = Date()
            let token = SocketToken("tok-\(s.issued.count + 1)", expiresAt: now.addingTimeInterval(lifetime * declared))
            s.issued.append(token)
            s.expiries[token.value] = now.addingTimeInterval(lifetime)
            return token
        }
    }

    /// When the server stops accepting `token` (nil: not issued here).
    func expiry(of token: SocketToken) -> Date? { state.withLock { $0.expiries[token.value] } }

    func stop() async { await server.shutdown(timeout: .seconds(2)) }
}
