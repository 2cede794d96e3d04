#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CSwitchboardShims
import Logging

/// The listening socket: accepts every pending connection on readiness and hands each to
/// `onAccept`. Loop-confined.
///
/// When `accept` fails for want of a resource (out of descriptors, `EMFILE`/`ENFILE`, or of
/// kernel memory), the pending connection stays in the backlog and level-triggered epoll would
/// wake the listener again at once: a spin on the loop that also serves connections, until a
/// descriptor frees. Instead the listener stops watching its socket and tries again after a
/// pause that grows from 10 ms to 1 s (``AcceptBackoff``), logging one warning per episode.
/// Chosen over a reserved descriptor to accept-and-close with: that frees a descriptor which
/// another thread of the process (a connection loop, a client dialling out) may take before the
/// accept, does nothing for `ENFILE` (the whole system is out), and turns away every client
/// while the server is at its limit, where a pause keeps them in the backlog and serves them
/// as soon as descriptors free up.
final class Listener: EventLoopIOHandler, @unchecked Sendable {
    // Safety: used only on `loop` after creation.
    let loop: EventLoop
    let fd: Int32
    private var slot = -1
    private let onAccept: (Int32, SocketAddress) -> Void
    private let logger: Logger
    private var backoff = AcceptBackoff()
    /// Set while accepts are paused: watches the socket again when it fires.
    private var resumeTimer: EventLoopTimer?
    private(set) var isClosed = false

    init(loop: EventLoop, fd: Int32, logger: Logger, onAccept: @escaping (Int32, SocketAddress) -> Void) {
        self.loop = loop
        self.fd = fd
        self.logger = logger
        self.onAccept = onAccept
    }

    func start() throws(SocketError) {
        slot = try loop.register(fd: fd, events: SystemConstants.epollIn, handler: self)
    }

    func handleIO(events: UInt32) {
        for _ in 0..<256 {
            guard !isClosed, resumeTimer == nil else { return }
            switch Socket.accept(fd) {
            case .accepted(let client, let address):
                backoff.accepted()
                onAccept(client, address)
            case .retry:
                continue
            case .wouldBlock:
                if let pauses = backoff.caughtUp() {
                    logger.info("accepting again: the backlog is empty", metadata: ["pauses": "\(pauses)"])
                }
                return
            case .failed(let error):
                pause(after: error)
                return
            }
        }
    }

    /// Stops watching the socket, and watches it again after the backoff's pause.
    private func pause(after error: Int32) {
        let (pause, startsEpisode) = backoff.failed()
        if startsEpisode {
            // Once per episode: a server held at its limit fails an accept every pause.
            logger.warning("accept failed: \(Self.describe(error)); pausing accepts (retrying after 10 ms, doubling up to 1 s) until the backlog is served",
                           metadata: ["errno": "\(error)"])
        }
        if slot >= 0 {
            loop.deregister(fd: fd, slot: slot)
            slot = -1
        }
        resumeTimer = loop.schedule(after: pause) { [self] in resume() }
    }

    private func resume() {
        resumeTimer = nil
        guard !isClosed else { return }
        do {
            // Level-triggered: pending connections wake the listener at once.
            slot = try loop.register(fd: fd, events: SystemConstants.epollIn, handler: self)
        } catch {
            pause(after: error.errno)
        }
    }

    /// `strerror` text with the errno's name for the ones that pause accepts.
    static func describe(_ error: Int32) -> String {
        let name: String
        switch error {
        case EMFILE: name = "EMFILE, out of descriptors for this process"
        case ENFILE: name = "ENFILE, out of descriptors for the system"
        case ENOBUFS: name = "ENOBUFS"
        case ENOMEM: name = "ENOMEM"
        default: name = "errno \(error)"
        }
        return "\(String(cString: strerror(error))) (\(name))"
    }

    func close() {
        guard !isClosed else { return }
        isClosed = true
        resumeTimer?.cancel()
        resumeTimer = nil
        if slot >= 0 { loop.deregister(fd: fd, slot: slot) }
        slot = -1
        Socket.close(fd)
    }
}
