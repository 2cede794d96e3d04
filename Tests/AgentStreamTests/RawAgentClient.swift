import Foundation
import Switchboard
import SwitchboardChannel
import SwitchboardCore

/// A bare client of `/v1/ws` for what `Channel` hides: the lines as the server sends them
/// (with or without `seq`), and commands the typed API may not have. Built on the library's
/// `SocketAdapter`, without reconnection.
struct RawAgentClient {
    let adapter: SocketAdapter
    let lines: AsyncStream<Data>

    /// Connects to session `session` with `token` as the bearer token (none: no header).
    static func connect(port: Int, session: String, token: String?, lastSequence: UInt64? = nil)
        async throws -> RawAgentClient {
        var url = "ws://127.0.0.1:\(port)/v1/ws?session_id=\(session)"
        if let lastSequence { url += "&last_seq=\(lastSequence)" }
        let headers = token.map { [(name: "Authorization", value: "Bearer \($0)")] } ?? []
        let adapter = SocketAdapter()
        let lines = try await adapter.connect(to: WebSocketURLEndpoint(url: url, headers: headers))
        return RawAgentClient(adapter: adapter, lines: lines)
    }

    /// Sends one command line.
    func send(_ line: String) async throws {
        try await adapter.send(text: line + "\n")
    }

    /// `{"type":"refresh","data":{"token":…}}`.
    func refresh(_ token: String) async throws {
        try await send(ChannelCommand.refreshLine(token: token))
    }

    /// Reads lines (as JSON objects; a line that is not one fails the test through an empty
    /// object) until `stop` says so (that line included) or the connection ends. A watchdog
    /// disconnects after `timeout`, so a missing line fails instead of hanging (generous: it
    /// only ends a failing run).
    func read(timeout: Duration = .seconds(60), until stop: ([String: Any]) -> Bool) async -> [[String: Any]] {
        let adapter = self.adapter
        let watchdog = Task {
            try await Task.sleep(for: timeout)
            await adapter.disconnect()
        }
        defer { watchdog.cancel() }
        var read: [[String: Any]] = []
        for await line in lines {
            let object = (try? JSONSerialization.jsonObject(with: line)) as? [String: Any] ?? [:]
            read.append(object)
            if stop(object) { break }
        }
        return read
    }

    /// Reads to the end of the connection (the server closes it).
    func readToEnd(timeout: Duration = .seconds(60)) async -> [[String: Any]] {
        await read(timeout: timeout) { _ in false }
    }

    /// Why the connection closed (nil while open).
    var closeStatus: WebSocketCloseStatus? { get async { await adapter.closeStatus } }

    func close() async { await adapter.disconnect() }
}

extension Dictionary where Key == String, Value == Any {
    /// `data.subtype` of a `system` event.
    var subtype: String? { (self["data"] as? [String: Any])?["subtype"] as? String }
    /// `data.message` of a `system` event.
    var systemMessage: String? { (self["data"] as? [String: Any])?["message"] as? String }
    /// `error.code` of an `error` event.
    var errorCode: String? { (self["error"] as? [String: Any])?["code"] as? String }
    /// The top-level `seq`.
    var seq: Int? { self["seq"] as? Int }
}
