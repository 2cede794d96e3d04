import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A TCP relay for tests that cut connections: listens on 127.0.0.1 (an ephemeral port),
/// forwards every accepted connection byte for byte to `127.0.0.1:targetPort`, and drops every
/// current connection abruptly on ``cutAll()`` (both sides see the TCP connection end, with no
/// WebSocket close frame: what a network change or a recycled load balancer does).
///
/// Plain blocking sockets, one thread per connection waiting in `poll` (no busy loop): small
/// and independent of the library under test.
package final class TCPRelay: @unchecked Sendable {
    // Safety: `state` is only touched under `lock`; the descriptors are owned by their threads
    // and only shut down (never closed) from other threads, under the lock.
    private struct State {
        var pairs: [Int: (client: Int32, server: Int32)] = [:]
        var nextID = 0
        var accepted = 0
        var cuts = 0
        var downstreamBytes = 0
        var stopped = false
        /// Cut every connection once this many bytes went server → client since the last cut.
        var cutAfterDownstreamBytes: Int?
        var downstreamSinceCut = 0
        /// Cut every connection when the server next sends something, without forwarding it.
        var cutBeforeNextDownstream = false
    }
    private let lock = NSLock()
    private var state = State()
    private let listener: Int32
    /// The port the relay listens on.
    package let port: Int
    /// Where connections are forwarded.
    package let targetPort: Int

    package init(targetPort: Int) throws {
        self.targetPort = targetPort
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw RelayError("socket: errno \(errno)") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 128) == 0 else {
            close(fd)
            throw RelayError("bind/listen: errno \(errno)")
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        listener = fd
        port = Int(UInt16(bigEndian: actual.sin_port))
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    deinit { stop() }

    /// Connections accepted so far.
    package var acceptedCount: Int { withLock { $0.accepted } }
    /// Connections open now.
    package var openCount: Int { withLock { $0.pairs.count } }
    /// Times ``cutAll()`` found at least one connection to cut.
    package var cutCount: Int { withLock { $0.cuts } }
    /// Bytes forwarded from the server to clients so far.
    package var downstreamBytes: Int { withLock { $0.downstreamBytes } }

    /// Drops every current connection (both directions, at once). Returns how many it dropped.
    @discardableResult
    package func cutAll() -> Int {
        withLock { s in
            for (_, p) in s.pairs {
                shutdown(p.client, Int32(SHUT_RDWR))
                shutdown(p.server, Int32(SHUT_RDWR))
            }
            s.downstreamSinceCut = 0
            if !s.pairs.isEmpty { s.cuts += 1 }
            return s.pairs.count
        }
    }

    /// From now on, cuts every connection each time `bytes` more bytes went from the server to
    /// the clients (mid-stream, wherever that falls in a frame); nil stops it.
    package func cutEvery(downstreamBytes bytes: Int?) {
        withLock { $0.cutAfterDownstreamBytes = bytes; $0.downstreamSinceCut = 0 }
    }

    /// Cuts every connection (once) as soon as a server sends anything more, and drops those
    /// bytes: the client never receives them, wherever they were in the stream.
    package func cutBeforeNextDownstream() {
        withLock { $0.cutBeforeNextDownstream = true }
    }

    /// Stops accepting and drops every connection.
    package func stop() {
        let first = withLock { s -> Bool in
            defer { s.stopped = true }
            return !s.stopped
        }
        guard first else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        cutAll()
    }

    private func withLock<R>(_ body: (inout State) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&state)
    }

    private static func loopback(port: UInt16) -> sockaddr_in {
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        return addr
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                break
            }
            if withLock({ $0.stopped }) {
                close(client)
                break
            }
            let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var addr = Self.loopback(port: UInt16(targetPort))
            let connected = server >= 0 && withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            } == 0
            guard connected else {
                if server >= 0 { close(server) }
                close(client)
                continue
            }
            let id = withLock { s -> Int in
                s.nextID += 1
                s.accepted += 1
                s.pairs[s.nextID] = (client, server)
                return s.nextID
            }
            let thread = Thread { [self] in pump(id: id, client: client, server: server) }
            thread.start()
        }
        close(listener)
    }

    /// Forwards both ways until either side ends or the pair is cut; then closes both.
    private func pump(id: Int, client: Int32, server: Int32) {
        var fds = [pollfd(fd: client, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: server, events: Int16(POLLIN), revents: 0)]
        var buffer = [UInt8](repeating: 0, count: 16384)
        loop: while true {
            let ready = poll(&fds, 2, -1)
            if ready < 0 {
                if errno == EINTR { continue }
                break
            }
            for (index, from, to) in [(0, client, server), (1, server, client)] where fds[index].revents != 0 {
                let n = buffer.withUnsafeMutableBytes { read(from, $0.baseAddress, $0.count) }
                if n <= 0 { break loop }
                if from == server && takeCutBeforeDownstream() {
                    cutAll()
                    break loop
                }
                if !writeAll(to, buffer, count: n) { break loop }
                if from == server && countDownstream(n) { break loop }
            }
        }
        withLock { _ = $0.pairs.removeValue(forKey: id) }
        close(client)
        close(server)
    }

    /// Whether a cut before the next downstream bytes was asked for (it is then done: once).
    private func takeCutBeforeDownstream() -> Bool {
        withLock { s in
            defer { s.cutBeforeNextDownstream = false }
            return s.cutBeforeNextDownstream
        }
    }

    /// Counts bytes sent to a client; true when that crossed the cut threshold (everything is cut).
    private func countDownstream(_ n: Int) -> Bool {
        let cut = withLock { s -> Bool in
            s.downstreamBytes += n
            s.downstreamSinceCut += n
            guard let limit = s.cutAfterDownstreamBytes else { return false }
            return s.downstreamSinceCut >= limit
        }
        if cut { cutAll() }
        return cut
    }

    private func writeAll(_ fd: Int32, _ buffer: [UInt8], count: Int) -> Bool {
        var offset = 0
        while offset < count {
            let n = buffer.withUnsafeBytes { raw -> Int in
                guard let base = raw.baseAddress else { return -1 }
                return send(fd, base + offset, count - offset, Int32(MSG_NOSIGNAL))
            }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return false }
            offset += n
        }
        return true
    }
}

/// Why a ``TCPRelay`` could not start.
package struct RelayError: Error, CustomStringConvertible {
    package let description: String
    init(_ d: String) { description = d }
}
