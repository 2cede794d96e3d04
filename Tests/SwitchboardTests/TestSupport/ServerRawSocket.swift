#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
@testable import Switchboard
import SwitchboardCore

/// A blocking TCP client over plain POSIX calls, for the bytes no well-behaved WebSocket library
/// will send (unmasked frames, invalid UTF-8, wrong versions, slow or huge heads). Use it only on
/// a thread of its own (``onServerTestThread(_:)``), never on the cooperative pool.
final class ServerRawSocket {
    typealias Failure = RawSocketFailure

    struct HTTPReply {
        var status: Int
        var headers: [(String, String)]
        var body: [UInt8]
        func header(_ name: String) -> String? {
            headers.first { $0.0.lowercased() == name.lowercased() }?.1
        }
        var bodyText: String { String(decoding: body, as: UTF8.self) }
    }

    struct Frame {
        var fin: Bool
        var opcode: UInt8
        var payload: [UInt8]
        /// RSV1–3 bits (0b100: compressed, RFC 7692).
        var rsv: UInt8 = 0
        /// For a close frame: the status code, if the payload has one.
        var closeCode: Int? { closeFrameCode(opcode: opcode, payload: payload) }
    }

    private(set) var fd: Int32
    private var buffer: [UInt8] = []

    /// Connects to 127.0.0.1:`port`; reads and writes time out after `timeout` seconds (a
    /// failure guard only — every read here expects something to arrive — so generous by
    /// default: the server may run under ThreadSanitizer on a loaded machine).
    /// `receiveBuffer` sets SO_RCVBUF before connecting (a small window for "slow" readers).
    /// `from` binds the socket to that local IPv4 address first (e.g. `127.0.0.2`: the whole of
    /// 127.0.0.0/8 is loopback on Linux), so that the server sees another peer address.
    init(port: Int, timeout: Double = 60, receiveBuffer: Int32? = nil, from localAddress: String? = nil) throws {
        fd = socket(AF_INET, SystemConstants.streamSocket, 0)
        guard fd >= 0 else { throw Failure("socket: errno \(errno)") }
        if var size = receiveBuffer {
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        if let localAddress {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_addr.s_addr = inet_addr(localAddress)
            let rc = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard rc == 0 else {
                let e = errno
                systemClose(fd)
                fd = -1
                throw Failure("bind \(localAddress): errno \(e)")
            }
        }
        setTimeout(timeout)
        do { try connectToLoopback(fd, port: port) } catch {
            fd = -1
            throw error
        }
    }

    deinit { close() }

    func setTimeout(_ seconds: Double) {
        var tv = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - Double(Int(seconds))) * 1_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    func close() {
        if fd >= 0 { systemClose(fd); fd = -1 }
    }

    // MARK: Writing

    func send(_ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { systemSend(fd, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw Failure("send: errno \(errno)")
            }
            sent += n
        }
    }

    func send(_ text: String) throws { try send(Array(text.utf8)) }

    // MARK: Reading

    /// Reads more bytes into the buffer; returns false at EOF. Throws on timeout or error.
    @discardableResult
    func fill() throws -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, $0.count, 0) }
            if n > 0 { buffer += chunk[0..<n]; return true }
            if n == 0 { return false }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK { throw Failure("read timed out") }
            throw Failure("recv: errno \(errno)")
        }
    }

    /// Whether the peer closed the connection (EOF, or a reset) within the timeout, discarding data.
    func readsEOF() -> Bool {
        while true {
            do {
                if try !fill() { return true }
                buffer.removeAll()
            } catch let f as Failure {
                return f.description.hasPrefix("recv") // ECONNRESET counts as closed
            } catch {
                return false
            }
        }
    }

    /// Every byte up to the peer's EOF (what was buffered included), consumed.
    func readToEOF() throws -> [UInt8] {
        while try fill() {}
        defer { buffer.removeAll() }
        return buffer
    }

    /// Reads one HTTP response head and its `Content-Length` body.
    func readHTTPResponse() throws -> HTTPReply {
        while true {
            if let reply = try bufferedHTTPResponse() { return reply }
            if try !fill() { throw Failure("EOF before the end of the HTTP response (got \(buffer.count) bytes)") }
        }
    }

    /// The HTTP response (head and `Content-Length` body) already read in whole, consumed; nil
    /// while it is incomplete.
    func bufferedHTTPResponse() throws -> HTTPReply? {
        let terminator: [UInt8] = [13, 10, 13, 10]
        guard buffer.count >= 4,
              let end = (0...(buffer.count - 4)).first(where: { buffer[$0..<($0 + 4)].elementsEqual(terminator) })
        else { return nil }
        let head = String(decoding: buffer[0..<end], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { throw Failure("bad status line: \(head)") }
        let headers = lines.compactMap { line -> (String, String)? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        var reply = HTTPReply(status: status, headers: headers, body: [])
        let length = reply.header("Content-Length").flatMap(Int.init) ?? 0
        guard buffer.count >= end + 4 + length else { return nil }
        reply.body = Array(buffer[(end + 4)..<(end + 4 + length)])
        buffer.removeFirst(end + 4 + length)
        return reply
    }

    /// Reads one (server, so unmasked) frame.
    func readFrame() throws -> Frame {
        while true {
            if let frame = try bufferedFrame() { return frame }
            if try !fill() { throw Failure("EOF inside a frame") }
        }
    }

    /// The next (server, so unmasked) frame already read in whole, consumed; nil while it is
    /// incomplete.
    func bufferedFrame() throws -> Frame? {
        guard let h = try RawFrameHeader.parse(buffer), buffer.count >= h.frameLength else { return nil }
        let payload = Array(buffer[h.headerLength..<h.frameLength])
        buffer.removeFirst(h.frameLength)
        return Frame(fin: h.fin, opcode: h.opcode, payload: payload, rsv: h.rsv)
    }

    // MARK: Many sockets at once

    /// True once a non-blocking read (``fillAvailable()``) saw EOF or a reset.
    private(set) var sawEOF = false

    /// Reads what is available without waiting. Returns whether anything (bytes, EOF, or a reset,
    /// which counts as EOF as in ``readsEOF()``) arrived.
    func fillAvailable() throws -> Bool {
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        var progressed = false
        while !sawEOF {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, $0.count, Int32(MSG_DONTWAIT)) }
            if n > 0 { buffer += chunk[0..<n]; progressed = true; continue }
            if n == 0 { sawEOF = true; return true }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK { break }
            if errno == ECONNRESET { sawEOF = true; return true }
            throw Failure("recv: errno \(errno)")
        }
        return progressed
    }

    /// Drives many sockets at once, in whatever order the server answers them: waits (poll) for
    /// sockets with something to read, reads it (``fillAvailable()``), and calls `step` for each
    /// socket not yet done until `step` returns true (done). `step` parses what was read
    /// (``bufferedFrame()``, ``bufferedHTTPResponse()``, ``sawEOF``). Throws when no socket
    /// receives anything for `stall`: a stuck server, not a slow one.
    static func driveAll(_ sockets: [ServerRawSocket], stall: Duration,
                         _ step: (Int, ServerRawSocket) throws -> Bool) throws {
        // Only a socket that received something can change its step's answer.
        var pending = try sockets.indices.filter { try !step($0, sockets[$0]) }
        var lastProgress = ContinuousClock.now
        while !pending.isEmpty {
            var fds = pending.map { pollfd(fd: sockets[$0].fd, events: Int16(POLLIN), revents: 0) }
            _ = poll(&fds, nfds_t(fds.count), 100)
            var progressed = false
            var stillPending: [Int] = []
            stillPending.reserveCapacity(pending.count)
            for (k, i) in pending.enumerated() {
                if fds[k].revents != 0, try sockets[i].fillAvailable() {
                    progressed = true
                    if try step(i, sockets[i]) { continue }
                }
                stillPending.append(i)
            }
            pending = stillPending
            if progressed {
                lastProgress = .now
            } else if ContinuousClock.now - lastProgress >= stall {
                throw Failure("\(pending.count) of \(sockets.count) sockets received nothing for \(stall)")
            }
        }
    }

    /// Reads frames until a close frame (returned) — skipping data frames.
    func readUntilCloseFrame() throws -> Frame {
        while true {
            let f = try readFrame()
            if f.opcode == 0x8 { return f }
        }
    }

    // MARK: WebSocket

    /// Sends an upgrade request for `path` and expects `101`.
    func handshake(path: String = "/", extraHeaders: [String] = []) throws {
        try send(Self.upgradeRequest(path: path, extraHeaders: extraHeaders))
        let reply = try readHTTPResponse()
        guard reply.status == 101 else { throw Failure("expected 101, got \(reply.status): \(reply.bodyText)") }
    }

    static func upgradeRequest(path: String = "/", version: String = "13", extraHeaders: [String] = []) -> String {
        var lines = [
            "GET \(path) HTTP/1.1",
            "Host: 127.0.0.1",
            "Upgrade: websocket",
            "Connection: Upgrade",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Version: \(version)",
        ]
        lines += extraHeaders
        return lines.joined(separator: "\r\n") + "\r\n\r\n"
    }

    /// A client frame; masked with a fixed key unless `masked` is false.
    static func frame(opcode: UInt8, payload: [UInt8], fin: Bool = true, masked: Bool = true) -> [UInt8] {
        var out: [UInt8] = [(fin ? 0x80 : 0) | opcode]
        let maskBit: UInt8 = masked ? 0x80 : 0
        if payload.count < 126 {
            out.append(maskBit | UInt8(payload.count))
        } else if payload.count < 65536 {
            out.append(maskBit | 126)
            out += [UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        } else {
            out.append(maskBit | 127)
            for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8((payload.count >> shift) & 0xFF)) }
        }
        if masked {
            let key: [UInt8] = [0x37, 0xFA, 0x21, 0x3D]
            out += key
            for (i, b) in payload.enumerated() { out.append(b ^ key[i & 3]) }
        } else {
            out += payload
        }
        return out
    }

    static func closeFrame(code: Int = 1000) -> [UInt8] {
        frame(opcode: 0x8, payload: [UInt8(code >> 8), UInt8(code & 0xFF)])
    }
}

/// Runs blocking work on a thread of its own (not the cooperative pool, which has only as many
/// threads as cores and is shared with the server's tasks).
func onServerTestThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { c in
        let thread = Thread { c.resume(with: Result { try body() }) }
        thread.stackSize = 1 << 20
        thread.start()
    }
}
