#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CSwitchboardShims

/// Waits for a non-blocking `connect` to finish (the socket turns writable). Loop-confined.
final class ConnectWatcher: EventLoopIOHandler {
    private let loop: EventLoop
    private let fd: Int32
    private var slot = -1
    private var completion: ((Int32) -> Void)?

    init(loop: EventLoop, fd: Int32, completion: @escaping (Int32) -> Void) {
        self.loop = loop
        self.fd = fd
        self.completion = completion
    }

    func start() throws(SocketError) {
        slot = try loop.register(fd: fd, events: SystemConstants.epollOut, handler: self)
    }

    func handleIO(events: UInt32) {
        finish(Socket.pendingError(fd))
    }

    /// Stops watching (the fd stays open); reports `errno` 0 on success.
    func finish(_ error: Int32) {
        guard let c = completion else { return }
        completion = nil
        loop.deregister(fd: fd, slot: slot)
        c(error)
    }
}
