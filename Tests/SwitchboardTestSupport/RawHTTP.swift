import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// One HTTP request written byte for byte to `127.0.0.1:port`, and the status and body of the
/// answer: for tests that send what a browser or an attacker would (any `Host`, any `Origin`),
/// which URLSession and WebSocket clients do not let a test choose. Blocking socket with a
/// receive timeout (a failure guard only), on a thread of its own.
package enum RawHTTP {
    /// The answer's status code, header block and body (up to the end of the head for a `101`).
    package struct Reply: Sendable {
        package let status: Int
        package let head: String
        package let body: String
    }

    package struct Failure: Error, CustomStringConvertible {
        package let description: String
    }

    /// Sends `request` (a complete HTTP/1.1 request, CRLFs included) and reads until the peer
    /// closes, or the head of a `101` is complete.
    /// `from`: the local IPv4 address to connect from (any of 127.0.0.0/8 is this machine's
    /// loopback on Linux: a second client address for tests of per-address limits).
    package static func exchange(port: Int, _ request: String, from: String? = nil,
                                 timeout: Duration = .seconds(30)) async throws -> Reply {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                continuation.resume(with: Result { try blockingExchange(port: port, request, from: from, timeout: timeout) })
            }
        }
    }

    /// A WebSocket upgrade request for `path` with the given `Host` and optional `Origin`.
    package static func upgradeRequest(path: String, host: String, origin: String?, extra: [String] = []) -> String {
        var lines = ["GET \(path) HTTP/1.1", "Host: \(host)", "Upgrade: websocket", "Connection: Upgrade",
                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13"]
        if let origin { lines.append("Origin: \(origin)") }
        lines += extra
        return lines.joined(separator: "\r\n") + "\r\n\r\n"
    }

    private static func blockingExchange(port: Int, _ request: String, from: String?, timeout: Duration) throws -> Reply {
        #if canImport(Darwin)
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #else
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #endif
        guard fd >= 0 else { throw Failure(description: "socket: errno \(errno)") }
        defer { close(fd) }
        var tv = timeval(tv_sec: Int(timeout.components.seconds), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        if let from {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_addr.s_addr = inet_addr(from)
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard bound == 0 else { throw Failure(description: "bind to \(from): errno \(errno)") }
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw Failure(description: "connect to \(port): errno \(errno)") }
        let bytes = Array(request.utf8)
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { throw Failure(description: "send: errno \(errno)") }
            sent += n
        }
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0, errno == EINTR { continue }
            // A server that answers before reading the request (a refusal at accept) closes with
            // the request unread, which resets the connection after its answer.
            if n < 0, errno == ECONNRESET, !received.isEmpty { break }
            if n < 0 { throw Failure(description: "recv: errno \(errno) after \(received.count) bytes") }
            if n == 0 { break }
            received += chunk[0..<n]
            let text = String(decoding: received, as: UTF8.self)
            if text.hasPrefix("HTTP/1.1 101"), text.contains("\r\n\r\n") { break }
        }
        let text = String(decoding: received, as: UTF8.self)
        guard let end = text.range(of: "\r\n\r\n"),
              let status = Int(text.split(separator: " ", maxSplits: 2).dropFirst().first ?? "") else {
            throw Failure(description: "no HTTP answer: \(text.debugDescription)")
        }
        return Reply(status: status, head: String(text[..<end.lowerBound]), body: String(text[end.upperBound...]))
    }
}
