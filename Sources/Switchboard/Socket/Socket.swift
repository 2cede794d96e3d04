#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CSwitchboardShims

/// Thin, non-throwing-on-EAGAIN wrappers over the POSIX socket calls the transport uses.
enum Socket {
    /// A new non-blocking, close-on-exec TCP socket.
    static func makeTCP(family: Int32) throws(SocketError) -> Int32 {
        let type = SystemConstants.streamSocket | SystemConstants.nonBlockingSocket | SystemConstants.closeOnExecSocket
        let fd = socket(family, type, 0)
        guard fd >= 0 else { throw SocketError(errno: errno, operation: "socket") }
        return fd
    }

    static func setNoDelay(_ fd: Int32) {
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    static func setReuseAddress(_ fd: Int32) {
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    enum ConnectResult { case connected, inProgress }

    static func connect(_ fd: Int32, to address: SocketAddress) throws(SocketError) -> ConnectResult {
        var storage = address.storage
        let rc = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { systemConnect(fd, $0, address.length) }
        }
        if rc == 0 { return .connected }
        let e = errno
        if e == EINPROGRESS || e == EINTR { return .inProgress }
        throw SocketError(errno: e, operation: "connect")
    }

    /// The pending error of a non-blocking connect (`SO_ERROR`), 0 when connected.
    static func pendingError(_ fd: Int32) -> Int32 {
        var err: Int32 = 0
        var len = socklen_t(MemoryLayout<Int32>.size)
        if getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 { return errno }
        return err
    }

    static func bindAndListen(_ fd: Int32, address: SocketAddress, backlog: Int32) throws(SocketError) {
        var storage = address.storage
        let rc = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, address.length) }
        }
        guard rc == 0 else { throw SocketError(errno: errno, operation: "bind") }
        guard listen(fd, backlog) == 0 else { throw SocketError(errno: errno, operation: "listen") }
    }

    static func localAddress(_ fd: Int32) -> SocketAddress? {
        var storage = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let rc = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        return rc == 0 ? SocketAddress(storage: storage, length: len) : nil
    }

    /// What `accept` gave: a connection; nothing pending (`wouldBlock`); a connection that failed
    /// before it was accepted, so that the next may be accepted at once (`retry`: `EINTR`,
    /// `ECONNABORTED`, and the network errors Linux passes on from the new socket, which
    /// accept(2) says to treat like `EAGAIN`); or an error that leaves the pending connection in
    /// the backlog (`failed`: `EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`…).
    enum AcceptResult { case accepted(Int32, SocketAddress), wouldBlock, retry, failed(Int32) }

    static func accept(_ fd: Int32) -> AcceptResult {
        var storage = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let client = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                switchboard_accept_nonblocking(fd, $0, &len)
            }
        }
        if client >= 0 { return .accepted(client, SocketAddress(storage: storage, length: len)) }
        let e = errno
        switch e {
        case EAGAIN, EWOULDBLOCK:
            return .wouldBlock
        case EINTR, ECONNABORTED, ENETDOWN, EPROTO, ENOPROTOOPT, EHOSTDOWN, ENONET, EHOSTUNREACH, EOPNOTSUPP,
             ENETUNREACH:
            return .retry
        default:
            return .failed(e)
        }
    }

    enum IOResult: Equatable { case bytes(Int), wouldBlock, eof, failed(Int32) }

    static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> IOResult {
        while true {
            let n = systemRead(fd, buffer.baseAddress, buffer.count)
            if n > 0 { return .bytes(n) }
            if n == 0 { return .eof }
            let e = errno
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { return .wouldBlock }
            return .failed(e)
        }
    }

    /// `send` with `MSG_NOSIGNAL` so a closed peer gives EPIPE instead of SIGPIPE.
    static func write(_ fd: Int32, _ buffer: UnsafeRawBufferPointer) -> IOResult {
        while true {
            let n = send(fd, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL))
            if n >= 0 { return .bytes(n) }
            let e = errno
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { return .wouldBlock }
            return .failed(e)
        }
    }

    /// Writes `first` then `second` with one `sendmsg` (`MSG_NOSIGNAL`, like ``write(_:_:)``).
    static func write(_ fd: Int32, _ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer) -> IOResult {
        guard second.count > 0 else { return write(fd, first) }
        guard first.count > 0 else { return write(fd, second) }
        var vectors = (iovec(iov_base: UnsafeMutableRawPointer(mutating: first.baseAddress), iov_len: first.count),
                       iovec(iov_base: UnsafeMutableRawPointer(mutating: second.baseAddress), iov_len: second.count))
        return withUnsafeMutableBytes(of: &vectors) { raw in
            var message = msghdr()
            message.msg_iov = raw.baseAddress?.assumingMemoryBound(to: iovec.self)
            message.msg_iovlen = 2
            while true {
                let n = sendmsg(fd, &message, Int32(MSG_NOSIGNAL))
                if n >= 0 { return .bytes(n) }
                let e = errno
                if e == EINTR { continue }
                if e == EAGAIN || e == EWOULDBLOCK { return .wouldBlock }
                return .failed(e)
            }
        }
    }

    /// `SO_LINGER` on with a zero timeout: the next `close` resets the connection (RST) and
    /// drops whatever the kernel still had to send, instead of keeping it until the peer reads.
    static func setLingerZero(_ fd: Int32) {
        var value = linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &value, socklen_t(MemoryLayout<linger>.size))
    }

    /// Bytes in the kernel's send queue, not yet acknowledged by the peer (`SIOCOUTQ`), or -1
    /// if unknown. Shrinks while the peer reads, even when no new write fits.
    static func unacknowledgedBytes(_ fd: Int32) -> Int32 {
        var value: Int32 = 0
        return ioctl(fd, UInt(TIOCOUTQ), &value) == 0 ? value : -1
    }

    static func close(_ fd: Int32) {
        systemClose(fd)
    }

    /// Closes with a TCP reset (`SO_LINGER` 0) instead of a FIN: for a socket refused as soon as
    /// it is accepted, the peer learns at once, and nothing stays behind on this side (no
    /// `TIME_WAIT`, no unsent data).
    static func reset(_ fd: Int32) {
        var option = linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size))
        systemClose(fd)
    }
}
