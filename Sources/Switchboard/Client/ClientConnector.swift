#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Logging
import Synchronization
import SwitchboardCore

/// Opens one client connection: TCP connect (each resolved address in turn, with a timeout),
/// optional TLS, the HTTP upgrade, then hands the socket to a ``WebSocketConnection``.
/// Lives on one loop; every method but ``connect(_:group:counters:)`` runs on it.
final class ClientConnector: SocketChannelDelegate, @unchecked Sendable {
    // Safety: all mutable state is touched only on `loop`'s thread.

    private let loop: EventLoop
    private let options: WebSocketClientOptions
    /// The adapter's counters: its logger, and what the new connection logs through.
    private let counters: ConnectionCounters?
    private var addresses: [SocketAddress] = []
    private var index = 0
    private var lastError: SwitchboardError?
    private var continuation: CheckedContinuation<WebSocketConnection, Error>?
    private var fd: Int32 = -1
    private var watcher: ConnectWatcher?
    private var channel: SocketChannel?
    private var timer: EventLoopTimer?
    private var handshake: WebSocketClientHandshake
    private var parser = HTTPResponseParser()
    private var rejected: (status: Int, body: [UInt8], remaining: Int?)?
    /// Set when cancellation arrived before the attempt started.
    private var cancelledEarly = false

    private init(loop: EventLoop, options: WebSocketClientOptions, handshake: WebSocketClientHandshake,
                 counters: ConnectionCounters?) {
        self.loop = loop
        self.options = options
        self.counters = counters
        self.handshake = handshake
    }

    /// Connects, or throws ``SwitchboardError`` (dns, connect, tls, handshakeRejected, handshakeFailed,
    /// timedOut, cancelled). Cancellation closes the socket promptly. `counters` (the adapter's)
    /// give the connector and the new connection their logger.
    static func connect(_ options: WebSocketClientOptions, group: EventLoopGroup,
                        counters: ConnectionCounters? = nil) async throws -> WebSocketConnection {
        var key = [UInt8](repeating: 0, count: 16)
        var rng = SecureRandom()
        for i in 0..<16 { key[i] = rng.next() }
        let handshake: WebSocketClientHandshake
        do {
            handshake = try WebSocketClientHandshake(host: options.hostHeader, path: options.target, key: key,
                                                     origin: options.origin, subprotocols: options.subprotocols,
                                                     deflate: options.configuration.compression,
                                                     extraHeaders: options.headers)
        } catch {
            throw SwitchboardError.invalidArgument(error.description)
        }
        let addresses = try await SocketAddress.resolve(host: SocketAddress.hostWithoutBrackets(options.host),
                                                        port: options.port)
        try Task.checkCancellation()
        let loop = group.next()
        let connector = ClientConnector(loop: loop, options: options, handshake: handshake, counters: counters)
        counters?.logger.debug("connecting", metadata: ["url": "\(options.redactedURL)",
                                                        "addresses": "\(addresses.count)"])
        let connection = try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<WebSocketConnection, Error>) in
                loop.execute {
                    if connector.cancelledEarly {
                        c.resume(throwing: SwitchboardError.cancelled)
                        return
                    }
                    connector.continuation = c
                    connector.addresses = addresses
                    connector.tryNextAddress()
                }
            }
        } onCancel: {
            loop.execute {
                connector.cancelledEarly = true
                connector.finish(.failure(SwitchboardError.cancelled))
            }
        }
        // Pairs with the release in `finish`: makes the hand-over of the connection built on the
        // loop thread visible to ThreadSanitizer, which cannot see through the runtime's
        // continuation resumption when the receiving actor is already running.
        _ = Self.handoff.load(ordering: .acquiring)
        return connection
    }

    private static let handoff = Atomic<Int>(0)

    // MARK: TCP

    private func tryNextAddress() {
        guard continuation != nil else { return }
        guard index < addresses.count else {
            finish(.failure(lastError ?? .connect(SocketError(errno: ECONNREFUSED, operation: "connect"),
                                                  address: "\(options.host):\(options.port)")))
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
                    } else {
                        connectFailed(SocketError(errno: err, operation: "connect"), address: address)
                    }
                }
                watcher = w
                try w.start()
                armTimer(options.connectTimeout) { [self] in
                    watcher?.finish(ETIMEDOUT)
                }
            }
        } catch {
            connectFailed(error, address: address)
        }
    }

    private func connectFailed(_ e: SocketError, address: SocketAddress) {
        timer?.cancel()
        if fd >= 0 { Socket.close(fd); fd = -1 }
        lastError = e.errno == ETIMEDOUT
            ? .timedOut("connect to \(address)")
            : .connect(e, address: address.description)
        tryNextAddress()
    }

    private func armTimer(_ duration: Duration, _ body: @escaping () -> Void) {
        timer?.cancel()
        timer = loop.schedule(after: duration, body)
    }

    // MARK: TLS and HTTP upgrade

    private func connected() {
        timer?.cancel()
        var session: TLSSession?
        if options.useTLS {
            do {
                let context = try TLSContextCache.client(options.tls)
                session = try TLSSession(clientWith: context, serverName: options.tls.serverNameOverride ?? options.host)
            } catch {
                Socket.close(fd)
                fd = -1
                finish(.failure(SwitchboardError.tls(error.description)))
                return
            }
        }
        let channel = SocketChannel(loop: loop, fd: fd, tls: session)
        fd = -1  // owned by the channel now
        self.channel = channel
        channel.delegate = self
        armTimer(options.configuration.handshakeTimeout) { [self] in
            finish(.failure(SwitchboardError.timedOut("WebSocket opening handshake")))
        }
        do {
            try channel.activate { [self] error in
                if let error {
                    finish(.failure(error))
                } else {
                    channel.write(handshake.requestBytes)
                }
            }
        } catch {
            finish(.failure(SwitchboardError.io(error)))
        }
    }

    func channelRead(_ bytes: UnsafeRawBufferPointer) {
        guard continuation != nil, let channel else { return }
        if rejected != nil {
            collectBody(bytes)
            return
        }
        let result: HTTPParseResult<HTTPResponseHead>
        do {
            result = try parser.parse(bytes)
        } catch {
            finish(.failure(SwitchboardError.handshakeFailed("invalid HTTP response: \(error)")))
            return
        }
        guard case .complete(let head, let consumed) = result else { return }
        let rest = UnsafeRawBufferPointer(rebasing: bytes[consumed...])
        if head.status != 101 {
            let length = head.headers["content-length"].flatMap { Int($0) }
            rejected = (head.status, [], length)
            collectBody(rest)
            return
        }
        let accepted: WebSocketClientHandshake.Accepted
        do {
            accepted = try handshake.accept(head)
        } catch {
            finish(.failure(SwitchboardError.handshakeFailed(error.description)))
            return
        }
        timer?.cancel()
        let connection = WebSocketConnection(channel: channel, role: .client, subprotocol: accepted.subprotocol,
                                             request: nil, configuration: options.configuration,
                                             deflate: accepted.deflate, counters: counters)
        counters?.logger.debug("connected", metadata: ["connection": "\(connection.id)",
                                                       "url": "\(options.redactedURL)"])
        let leftover = [UInt8](rest)
        self.channel = nil
        connection.start(leftover: leftover)
        finish(.success(connection))
    }

    /// Keeps up to 64 KiB of a rejection's body for the error.
    private func collectBody(_ bytes: UnsafeRawBufferPointer) {
        guard var r = rejected else { return }
        let room = max(0, 65_536 - r.body.count)
        r.body.append(contentsOf: bytes.prefix(room))
        rejected = r
        if let length = r.remaining, r.body.count >= min(length, 65_536) {
            finishRejected()
        } else if r.body.count >= 65_536 {
            finishRejected()
        }
    }

    private func finishRejected() {
        guard let r = rejected else { return }
        finish(.failure(SwitchboardError.handshakeRejected(status: r.status, body: String(decoding: r.body, as: UTF8.self))))
    }

    func channelEOF() {
        if rejected != nil { finishRejected(); return }
        finish(.failure(SwitchboardError.handshakeFailed("connection closed during the opening handshake")))
    }

    func channelFailed(_ error: SwitchboardError) {
        if rejected != nil { finishRejected(); return }
        finish(.failure(error))
    }

    func channelWritable() {}

    private func finish(_ result: Result<WebSocketConnection, SwitchboardError>) {
        timer?.cancel()
        timer = nil
        guard let c = continuation else { return }
        continuation = nil
        if case .failure(let error) = result {
            counters?.logger.debug("connect failed", metadata: ["url": "\(options.redactedURL)",
                                                                "error": "\(error)"])
            watcher?.finish(ECANCELED)
            if fd >= 0 { Socket.close(fd); fd = -1 }
            channel?.close()
            channel = nil
        }
        Self.handoff.wrappingAdd(1, ordering: .releasing)
        c.resume(with: result.mapError { $0 as Error })
    }
}

/// One `SSL_CTX` per distinct client TLS configuration (loading the trust store is costly).
enum TLSContextCache {
    private static let cache = Locked<[(TLSConfiguration, TLSContext)]>([])

    static func client(_ configuration: TLSConfiguration) throws(TLSError) -> TLSContext {
        try cache.withLock { entries throws(TLSError) -> TLSContext in
            if let hit = entries.first(where: { $0.0 == configuration }) { return hit.1 }
            let ctx = try TLSContext.client(configuration)
            entries.append((configuration, ctx))
            if entries.count > 16 { entries.removeFirst() }
            return ctx
        }
    }
}
