import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SwitchboardTestSupport

/// A fake Redis for one connection, whose replies the test writes by hand: for orders of
/// replies a real `redis-server` cannot be made to produce on demand (a reply held back while
/// the next ones arrive).
///
/// Plain blocking sockets on 127.0.0.1 (an ephemeral port); each blocking step runs on a
/// thread of its own, never on the Swift concurrency pool.
final class ScriptedRESPServer: @unchecked Sendable {
    // Safety: `client` and `buffer` are touched by one step at a time (the test awaits each
    // step before the next); `listener` is immutable.
    private let listener: Int32
    private var client: Int32 = -1
    private var buffer: [UInt8] = []
    /// The port it listens on.
    let port: Int

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw RedisServerProcess.Failure("socket: errno \(errno)") }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = 0
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 8) == 0 else {
            close(fd)
            throw RedisServerProcess.Failure("bind/listen: errno \(errno)")
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        listener = fd
        port = Int(UInt16(bigEndian: actual.sin_port))
    }

    deinit {
        if client >= 0 { close(client) }
        close(listener)
    }

    /// `redis://127.0.0.1:port`.
    var url: String { "redis://127.0.0.1:\(port)" }

    /// Waits for the client's connection.
    func acceptClient() async throws {
        try await onThread { [self] in
            let fd = accept(listener, nil, nil)
            guard fd >= 0 else { throw RedisServerProcess.Failure("accept: errno \(errno)") }
            client = fd
        }
    }

    /// Closes the client's connection (the next ``acceptClient()`` waits for another one).
    func closeClient() {
        if client >= 0 { close(client) }
        client = -1
        buffer = []
    }

    /// The next command the client sent (an array of bulk strings), waiting for it.
    func readCommand() async throws -> [String] {
        try await onThread { [self] in
            while true {
                if let (command, used) = Self.parseCommand(buffer) {
                    buffer.removeFirst(used)
                    return command
                }
                var chunk = [UInt8](repeating: 0, count: 4096)
                let n = read(client, &chunk, chunk.count)
                guard n > 0 else { throw RedisServerProcess.Failure("the client closed the connection (\(n), errno \(errno))") }
                buffer += chunk[..<n]
            }
        }
    }

    /// Writes `text` (RESP, `\r\n` included) to the client.
    func send(_ text: String) async throws {
        try await onThread { [self] in
            var bytes = Array(text.utf8)[...]
            while !bytes.isEmpty {
                let n = bytes.withUnsafeBytes { write(client, $0.baseAddress, $0.count) }
                guard n > 0 else { throw RedisServerProcess.Failure("write: errno \(errno)") }
                bytes = bytes.dropFirst(n)
            }
        }
    }

    /// A pub/sub confirmation as Redis sends it: `subscribe`/`unsubscribe`, channel, count.
    static func confirmation(_ kind: String, _ channel: String, count: Int) -> String {
        "*3\r\n$\(kind.utf8.count)\r\n\(kind)\r\n$\(channel.utf8.count)\r\n\(channel)\r\n:\(count)\r\n"
    }

    /// `*N\r\n` then N `$len\r\nbytes\r\n`; nil while incomplete.
    private static func parseCommand(_ bytes: [UInt8]) -> ([String], Int)? {
        var i = 0
        func line() -> String? {
            var j = i
            while j + 1 < bytes.count {
                if bytes[j] == 13 && bytes[j + 1] == 10 {
                    let text = String(decoding: bytes[i..<j], as: UTF8.self)
                    i = j + 2
                    return text
                }
                j += 1
            }
            return nil
        }
        guard let header = line(), header.hasPrefix("*"), let count = Int(header.dropFirst()) else { return nil }
        var parts: [String] = []
        for _ in 0..<count {
            guard let size = line(), size.hasPrefix("$"), let length = Int(size.dropFirst()),
                  i + length + 2 <= bytes.count else { return nil }
            parts.append(String(decoding: bytes[i..<(i + length)], as: UTF8.self))
            i += length + 2
        }
        return (parts, i)
    }

    private func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try body() }) }.start()
        }
    }
}
