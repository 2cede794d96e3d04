import Foundation
import Logging
@testable import Switchboard
import SwitchboardCore
import SwitchboardTestSupport

/// An in-process server whose authenticator accepts the tokens the test issued (`tok-1`,
/// `tok-2`, …), each valid until the expiry the test chose for it, and accepts connections with
/// `.accept(userInfo:expiresAt:)` carrying that expiry. No JWT: the tokens are names in a
/// table. Route `/v1/ws` (a task route or a callback route), one line per command:
/// - `refresh tok-N`: a valid token moves the connection's deadline to its expiry
///   (`extendAuthentication(until:)`) and is answered `refreshed`; else `invalid_token`;
/// - `deadline`: answered `deadline <ms since 1970>` or `deadline none`;
/// - `close N`: closes the connection with code N (e.g. 1012, which a client retries);
/// - anything else: `echo <line>`.
/// It records the tokens of every upgrade and refresh, and the close code of every connection.
final class ExpiringTokenServer: Sendable {
    enum Style: Sendable { case task, callbacks }

    struct State {
        var expiries: [String: Date?] = [:]
        var issued = 0
        var upgradeTokens: [String] = []
        var refreshTokens: [String] = []
        var closeCodes: [UInt16] = []
        var refusals: [Int] = []
        var openDeadlines: [Date?] = []
    }

    let server: WebSocketServer
    let port: Int
    let state: TestLock<State>
    /// The route's endpoint, with `headers` (e.g. an `Authorization` the provider replaces).
    func endpoint(headers: [(name: String, value: String)] = []) throws -> WebSocketURLEndpoint {
        try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/v1/ws", headers: headers)
    }

    /// Starts on a free port. `onOpen` runs on the connection as soon as it is open (in
    /// `onOpen` for callbacks, first thing in the handler for a task), before the
    /// authentication timer can fire.
    init(style: Style = .task, logger: Logger? = nil,
         onOpen: (@Sendable (isolated WebSocketConnection) -> Void)? = nil) async throws {
        let state = TestLock(State())
        self.state = state
        let configuration = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        server = WebSocketServer(configuration: configuration, logger: logger ?? Logger(label: "test.server"))
        let authenticate: @Sendable (WebSocketUpgradeRequest) async -> WebSocketAuthDecision = { request in
            let token = request.bearerToken ?? ""
            enum Decision { case accept(Date?), refuse(Int) }
            let decision: Decision = state.withLock { s in
                s.upgradeTokens.append(token)
                if !s.refusals.isEmpty { return .refuse(s.refusals.removeFirst()) }
                guard let expiry = s.expiries[token] else { return .refuse(401) }
                if let expiry, expiry <= Date() { return .refuse(401) }
                return .accept(expiry)
            }
            switch decision {
            case .accept(let expiresAt):
                return .accept(userInfo: ["sub": "alice"], expiresAt: expiresAt)
            case .refuse(401):
                return .unauthorized("invalid or expired token")
            case .refuse(let status):
                return .reject(.error(status: status, message: "refused", type: .rateLimit, code: "refused"))
            }
        }
        let opened: @Sendable (isolated WebSocketConnection) -> Void = { connection in
            let deadline = connection.authenticationExpiresAt
            state.withLock { $0.openDeadlines.append(deadline) }
            connection.onClose { status in state.withLock { $0.closeCodes.append(status.code.rawValue) } }
            onOpen?(connection)
        }
        switch style {
        case .task:
            server.route("/v1/ws", authenticate: authenticate) { connection in
                opened(connection)
                for await line in connection.lines() {
                    guard let answer = Self.answer(String(decoding: line, as: UTF8.self), on: connection,
                                                   state: state) else { continue }
                    try? await connection.send(text: answer + "\n")
                }
            }
        case .callbacks:
            server.route("/v1/ws", authenticate: authenticate, callbacks: WebSocketCallbacks(
                onOpen: { connection in opened(connection) },
                onMessage: { connection, message in
                    guard let text = message.text else { return }
                    for line in text.split(separator: "\n") {
                        guard let answer = Self.answer(String(line), on: connection, state: state) else { continue }
                        _ = try connection.sendNow(.text(Array((answer + "\n").utf8)))
                    }
                }))
        }
        port = try await server.start()
    }

    private static func answer(_ line: String, on connection: isolated WebSocketConnection,
                               state: TestLock<State>) -> String? {
        if line.hasPrefix("close "), let code = UInt16(line.dropFirst("close ".count)) {
            connection.startClose(code: WebSocketCloseCode(rawValue: code), reason: "")
            return nil
        }
        if line.hasPrefix("refresh ") {
            let token = String(line.dropFirst("refresh ".count))
            let expiry: Date?? = state.withLock { s in
                s.refreshTokens.append(token)
                return s.expiries[token]
            }
            guard let expiry, let until = expiry, until > Date() else { return "invalid_token" }
            connection.extendAuthentication(until: until)
            return "refreshed"
        }
        if line == "deadline" {
            return "deadline " + (connection.authenticationExpiresAt.map { "\(Int64($0.timeIntervalSince1970 * 1000))" } ?? "none")
        }
        return "echo \(line)"
    }

    /// A new token, valid for `lifetime` from now (nil: without expiry), declared to the client
    /// as expiring after `declared` of that lifetime (1: its real expiry).
    func issue(lifetime: Duration?, declared: Double = 1) -> SocketToken {
        let now = Date()
        let seconds = lifetime.map { Double($0.components.seconds) + Double($0.components.attoseconds) / 1e18 }
        let expiresAt = seconds.map { now.addingTimeInterval($0) }
        let value = state.withLock { s in
            s.issued += 1
            let value = "tok-\(s.issued)"
            s.expiries[value] = .some(expiresAt)
            return value
        }
        return SocketToken(value, expiresAt: seconds.map { now.addingTimeInterval($0 * declared) })
    }

    /// When the server stops accepting `token` (nil: not issued here, or without expiry).
    func expiry(of token: SocketToken) -> Date? { state.withLock { $0.expiries[token.value] ?? nil } }

    /// The next upgrades are refused with these statuses, whatever their token.
    func refuseNextUpgrades(_ statuses: [Int]) { state.withLock { $0.refusals += statuses } }

    var upgradeTokens: [String] { state.withLock { $0.upgradeTokens } }
    var refreshTokens: [String] { state.withLock { $0.refreshTokens } }
    var closeCodes: [UInt16] { state.withLock { $0.closeCodes } }
    var openDeadlines: [Date?] { state.withLock { $0.openDeadlines } }

    func stop() async { await server.shutdown(timeout: .seconds(2)) }
}
