import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One HTTP/1.1 exchange over a plain socket: sends `request`, reads until the server closes
/// (its refusals and plain answers carry `Connection: close`). For what `SwitchboardError`
/// does not show, such as a refusal's `Retry-After` header. Blocking: run it off the
/// cooperative pool.
func rawHTTPExchange(port: Int, request: String) async throws -> String {
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<String, any Error>) in
        Thread.detachNewThread {
            continuation.resume(with: Result { try blockingExchange(port: port, request: request) })
        }
    }
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

private func blockingExchange(port: Int, request: String) throws -> String {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw TestFailure("socket: \(errno)") }
    defer { close(fd) }
    var timeout = timeval(tv_sec: 60, tv_usec: 0)   // a failure guard only
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    guard connected == 0 else { throw TestFailure("connect: \(errno)") }
    let bytes = Array(request.utf8)
    var sent = 0
    while sent < bytes.count {
        let n = bytes[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard n > 0 else { throw TestFailure("send: \(errno)") }
        sent += n
    }
    var received: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n < 0, errno == EINTR { continue }
        if n <= 0 { break }
        received += chunk[0..<n]
    }
    return String(decoding: received, as: UTF8.self)
}
