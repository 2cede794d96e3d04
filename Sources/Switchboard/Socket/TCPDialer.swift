#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Opens a non-blocking TCP connection: each resolved address in turn, each within a time
/// limit, until one connects. Loop-confined; used by every client transport (WebSocket and
/// Redis).
final class TCPDialer {
    private let loop: EventLoop
    private let addresses: [SocketAddress]
    private let timeout: Duration
    /// How an address is named in errors (for example "proxy 10.0.0.1:3128").
    private let name: (SocketAddress) -> String
    /// What the connection goes to, for the error when there is no address at all.
    private let target: String
    private var index = 0
    private var lastError: SwitchboardError?
    private var fd: Int32 = -1
    private var watcher: ConnectWatcher?
    private var timer: EventLoopTimer?
    private var completion: ((Result<Int32, SwitchboardError>) -> Void)?

    init(loop: EventLoop, addresses: [SocketAddress], timeout: Duration, target: String,
         name: @escaping (SocketAddress) -> String = { $0.description }) {
        self.loop = loop
        self.addresses = addresses
        self.timeout = timeout
        self.target = target
        self.name = name
    }

    /// Starts dialing; `completion` gets the connected descriptor (the caller owns it) or the
    /// last address's error, once.
    func start(_ completion: @escaping (Result<Int32, SwitchboardError>) -> Void) {
        self.completion = completion
        tryNextAddress()
    }

    /// Stops dialing and closes the socket in progress; the completion is not called.
    func cancel() {
        completion = nil
        timer?.cancel()
        timer = nil
        watcher?.finish(ECANCELED)
        watcher = nil
        if fd >= 0 { Socket.close(fd); fd = -1 }
    }

    private func tryNextAddress() {
        guard completion != nil else { return }
        guard index < addresses.count else {
            finish(.failure(lastError ?? .connect(SocketError(errno: ECONNREFUSED, operation: "connect"),
                                                  address: target)))
            return
        }
        let address = addresses[index]
        index += 1
        do {
            fd = try Socket.makeTCP(family: address.family)
            Socket.setNoDelay(fd)
            switch try Socket.connect(fd, to: address) {
            case .connected:
                connected()
            case .inProgress:
                let w = ConnectWatcher(loop: loop, fd: fd) { [self] err in
                    watcher = nil
                    if err == 0 {
                        connected()
                    } else if err != ECANCELED {
                        failed(SocketError(errno: err, operation: "connect"), address: address)
                    }
                }
                watcher = w
                try w.start()
                timer = loop.schedule(after: timeout) { [self] in
                    watcher?.finish(ETIMEDOUT)
                }
            }
        } catch {
            failed(error, address: address)
        }
    }

    private func connected() {
        let connectedFD = fd
        fd = -1
        finish(.success(connectedFD))
    }

    private func failed(_ e: SocketError, address: SocketAddress) {
        timer?.cancel()
        timer = nil
        if fd >= 0 { Socket.close(fd); fd = -1 }
        lastError = e.errno == ETIMEDOUT ? .timedOut("connect to \(name(address))") : .connect(e, address: name(address))
        tryNextAddress()
    }

    private func finish(_ result: Result<Int32, SwitchboardError>) {
        timer?.cancel()
        timer = nil
        guard let c = completion else {
            if case .success(let fd) = result { Socket.close(fd) }
            return
        }
        completion = nil
        c(result)
    }
}
