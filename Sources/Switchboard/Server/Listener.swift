#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CSwitchboardShims

/// The listening socket: accepts every pending connection on readiness and hands each to
/// `onAccept`. Loop-confined.
final class Listener: EventLoopIOHandler, @unchecked Sendable {
    // Safety: used only on `loop` after creation.
    let loop: EventLoop
    let fd: Int32
    private var slot = -1
    private let onAccept: (Int32, SocketAddress) -> Void
    private(set) var isClosed = false

    init(loop: EventLoop, fd: Int32, onAccept: @escaping (Int32, SocketAddress) -> Void) {
        self.loop = loop
        self.fd = fd
        self.onAccept = onAccept
    }

    func start() throws(SocketError) {
        slot = try loop.register(fd: fd, events: SystemConstants.epollIn, handler: self)
    }

    func handleIO(events: UInt32) {
        for _ in 0..<256 {
            guard !isClosed else { return }
            switch Socket.accept(fd) {
            case .accepted(let client, let address):
                onAccept(client, address)
            case .wouldBlock:
                return
            case .failed:
                // E.g. EMFILE/ENFILE (out of descriptors): stop for this round; level-triggered
                // epoll retries, and the loop keeps serving existing connections.
                return
            }
        }
    }

    func close() {
        guard !isClosed else { return }
        isClosed = true
        loop.deregister(fd: fd, slot: slot)
        Socket.close(fd)
    }
}
