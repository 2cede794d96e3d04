import Foundation
import SwitchboardTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// One HTTP/1.1 exchange over a plain socket: sends `request`, reads until the server closes
/// (its refusals and plain answers carry `Connection: close`). For what `SwitchboardError`
/// does not show, such as a refusal's `Retry-After` header. Blocking: run it off the
/// cooperative pool.
func rawHTTPExchange(port: Int, request: String) async throws -> String {
    let reply = try await RawHTTP.exchange(port: port, request)
    return reply.head + "\r\n\r\n" + reply.body
}

/// The response to an upgrade request for `/v1/ws?<query>` (a fixed key), with `headers` added.
func rawUpgrade(port: Int, query: String, headers: [String] = []) async throws -> String {
    let lines = ["GET /v1/ws?\(query) HTTP/1.1", "Host: 127.0.0.1:\(port)", "Upgrade: websocket",
                 "Connection: Upgrade", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                 "Sec-WebSocket-Version: 13"] + headers
    return try await rawHTTPExchange(port: port, request: lines.joined(separator: "\r\n") + "\r\n\r\n")
}

/// The body of `GET path` (a JSON object as a dictionary).
func getJSON(port: Int, path: String) async throws -> [String: Any] {
    let response = try await rawHTTPExchange(port: port, request: "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    guard response.hasPrefix("HTTP/1.1 200"), let split = response.range(of: "\r\n\r\n") else {
        throw TestFailure("GET \(path): \(response)")
    }
    let body = Data(response[split.upperBound...].utf8)
    guard let object = try JSONSerialization.jsonObject(with: body) as? [String: Any] else {
        throw TestFailure("GET \(path): not a JSON object: \(response)")
    }
    return object
}
