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
    private var continuation: CheckedContinuation<WebSocketConnection, Error>?
    private var dialer: TCPDialer?
    private var channel: SocketChannel?
    private var timer: EventLoopTimer?
    private var handshake: WebSocketClientHandshake
    private var parser = HTTPResponseParser()
    private var rejected: (status: Int, body: [UInt8], remaining: Int?)?
    /// `wss`: the TLS handshake completed (the upgrade request went out).
    private var tlsEstablished = false
    /// Whether any byte of the server's answer to the upgrade arrived.
    private var receivedResponseBytes = false
    /// While the proxy's answer to `CONNECT` is awaited: the tunnel and its parser.
    private var tunnel: (request: HTTPProxyTunnel, parser: HTTPResponseParser)?
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
        // Through a proxy, the TCP connection goes to the proxy; the target is named in CONNECT.
        let addresses: [SocketAddress]
        do {
            addresses = try await SocketAddress.resolve(
                host: SocketAddress.hostWithoutBrackets(options.proxy?.host ?? options.host),
                port: options.proxy?.port ?? options.port)
        } catch let error as SwitchboardError where error.kind == .dns && options.proxy != nil {
            throw SwitchboardError(kind: .dns, message: "proxy: \(error.message)")
        }
        try Task.checkCancellation()
        let loop = group.next()
        let connector = ClientConnector(loop: loop, options: options, handshake: handshake, counters: counters)
        var metadata: Logger.Metadata = ["url": "\(options.redactedURL)", "addresses": "\(addresses.count)"]
        if let proxy = options.proxy { metadata["proxy"] = "\(proxy.redactedURL)" }
        counters?.logger.debug("connecting", metadata: metadata)
        let connection = try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<WebSocketConnection, Error>) in
                loop.execute {
                    if connector.cancelledEarly {
                        c.resume(throwing: SwitchboardError.cancelled)
                        return
                    }
                    connector.continuation = c
                    connector.dial(addresses)
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

    private func dial(_ addresses: [SocketAddress]) {
        let dialer = TCPDialer(loop: loop, addresses: addresses, timeout: options.connectTimeout, target: dialedName) {
            [proxied = options.proxy != nil] address in proxied ? "proxy \(address)" : address.description
        }
        self.dialer = dialer
        dialer.start { [self] result in
            self.dialer = nil
            switch result {
            case .success(let fd): connected(fd)
            case .failure(let error): finish(.failure(error))
            }
        }
    }

    /// What the TCP connection goes to, for messages: the server, or the proxy.
    private var dialedName: String {
        if let proxy = options.proxy { return "proxy \(proxy.address)" }
        return "\(options.host):\(options.port)"
    }

    private func armTimer(_ duration: Duration, _ body: @escaping () -> Void) {
        timer?.cancel()
        timer = loop.schedule(after: duration, body)
    }

    // MARK: TLS and HTTP upgrade

    private func connected(_ fd: Int32) {
        timer?.cancel()
        if let proxy = options.proxy {
            openTunnel(through: proxy, fd: fd)
            return
        }
        let session: TLSSession?
        do {
            session = try makeTLSSession()
        } catch {
            Socket.close(fd)
            finish(.failure(error))
            return
        }
        let channel = SocketChannel(loop: loop, fd: fd, tls: session)  // owns the descriptor now
        self.channel = channel
        channel.delegate = self
        armHandshakeTimer()
        do {
            try channel.activate { [self] error in
                if let error {
                    finish(.failure(error))
                } else {
                    tlsEstablished = options.useTLS
                    channel.write(handshake.requestBytes)
                }
            }
        } catch {
            finish(.failure(SwitchboardError.io(error)))
        }
    }

    /// A client TLS session for `wss` (SNI and verification against the target host), nil for `ws`.
    private func makeTLSSession() throws(SwitchboardError) -> TLSSession? {
        guard options.useTLS else { return nil }
        do {
            let context = try TLSContextCache.client(options.tls)
            return try TLSSession(clientWith: context, serverName: options.tls.serverNameOverride ?? options.host)
        } catch {
            throw SwitchboardError.tls(error)
        }
    }

    /// The opening handshake's time limit covers the proxy's answer, TLS and the upgrade.
    private func armHandshakeTimer() {
        armTimer(options.configuration.handshakeTimeout) { [self] in
            let what = tunnel != nil ? "the proxy's answer to CONNECT" : "WebSocket opening handshake"
            finish(.failure(SwitchboardError.timedOut(what)))
        }
    }

    // MARK: HTTP CONNECT proxy

    /// Sends `CONNECT host:port` on a plain channel to the proxy; ``proxyAnswered(_:rest:)``
    /// takes it from there.
    private func openTunnel(through proxy: HTTPProxyServer, fd: Int32) {
        let request: HTTPProxyTunnel
        do {
            request = try HTTPProxyTunnel(host: SocketAddress.hostWithoutBrackets(options.host), port: options.port,
                                          username: proxy.username, password: proxy.password)
        } catch {
            Socket.close(fd)
            finish(.failure(SwitchboardError.invalidArgument(error.description)))
            return
        }
        let channel = SocketChannel(loop: loop, fd: fd, tls: nil)
        self.channel = channel
        channel.delegate = self
        tunnel = (request, HTTPResponseParser())
        armHandshakeTimer()
        do {
            try channel.activate()
            channel.write(request.requestBytes)
        } catch {
            finish(.failure(SwitchboardError.io(error)))
        }
    }

    /// The proxy's answer: on 2xx, TLS (for `wss`) and the upgrade start inside the tunnel.
    private func proxyAnswered(_ head: HTTPResponseHead, rest: UnsafeRawBufferPointer) {
        guard let request = tunnel?.request, let proxy = options.proxy, let channel else { return }
        tunnel = nil
        let answer = "HTTP \(head.status)\(head.reason.isEmpty ? "" : " \(head.reason)")"
        switch request.outcome(of: head) {
        case .authenticationRequired(let credentialsSent):
            finish(.failure(SwitchboardError.proxy(
                "proxy \(proxy.address) requires authentication: \(answer) "
                    + (credentialsSent ? "(the credentials sent were refused)" : "(no credentials were given)"),
                status: head.status)))
        case .refused(let status) where status >= 500:
            finish(.failure(SwitchboardError.proxy(
                "proxy \(proxy.address) could not open a tunnel to \(request.authority): \(answer)", status: status)))
        case .refused(let status):
            finish(.failure(SwitchboardError.proxy(
                "proxy \(proxy.address) refused a tunnel to \(request.authority): \(answer)", status: status)))
        case .established:
            counters?.logger.debug("proxy tunnel open", metadata: ["proxy": "\(proxy.redactedURL)",
                                                                   "target": "\(request.authority)"])
            let session: TLSSession?
            do {
                session = try makeTLSSession()
            } catch {
                finish(.failure(error))
                return
            }
            guard let session else {
                channel.write(handshake.requestBytes)
                // The server speaks after our request only; anything here is its (early) answer.
                if !rest.isEmpty { channelRead(rest) }
                return
            }
            guard rest.isEmpty else {
                finish(.failure(SwitchboardError.proxy(
                    "proxy \(proxy.address) sent \(rest.count) bytes after its \(answer) before TLS started")))
                return
            }
            channel.startTLS(session) { [self] error in
                if let error {
                    finish(.failure(error))
                } else {
                    tlsEstablished = true
                    channel.write(handshake.requestBytes)
                }
            }
        }
    }

    func channelRead(_ bytes: UnsafeRawBufferPointer) {
        guard continuation != nil, let channel else { return }
        if var state = tunnel {
            let result: HTTPParseResult<HTTPResponseHead>
            do {
                result = try state.parser.parse(bytes)
            } catch {
                let name = options.proxy?.address ?? ""
                finish(.failure(SwitchboardError.proxy("invalid answer from proxy \(name) to CONNECT: \(error)")))
                return
            }
            tunnel = state
            guard case .complete(let head, let consumed) = result else { return }
            proxyAnswered(head, rest: UnsafeRawBufferPointer(rebasing: bytes[consumed...]))
            return
        }
        if rejected != nil {
            collectBody(bytes)
            return
        }
        receivedResponseBytes = true
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
        let connection = WebSocketConnection(channel: channel, subprotocol: accepted.subprotocol, response: head,
                                             tlsVersion: channel.tlsProtocolVersion,
                                             configuration: options.configuration,
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
        if tunnel != nil, let proxy = options.proxy {
            finish(.failure(SwitchboardError.proxy("proxy \(proxy.address) closed the connection before answering CONNECT")))
            return
        }
        if let closed = closedAfterTLSHandshake("closed the connection") {
            finish(.failure(closed))
            return
        }
        finish(.failure(SwitchboardError.handshakeFailed("connection closed during the opening handshake")))
    }

    func channelFailed(_ error: SwitchboardError) {
        if rejected != nil { finishRejected(); return }
        if error.kind == .io, error.errno == ECONNRESET, let closed = closedAfterTLSHandshake("reset the connection") {
            finish(.failure(closed))
            return
        }
        finish(.failure(error))
    }

    /// TLS 1.3 ends the client's handshake before the server has checked the client's
    /// certificate: a server that refuses it (or its absence) and closes without an alert,
    /// before any byte of its answer, looks like this. Nil in any other situation.
    private func closedAfterTLSHandshake(_ what: String) -> SwitchboardError? {
        guard options.useTLS, tlsEstablished, !receivedResponseBytes else {
            return nil
        }
        return SwitchboardError.handshakeFailed(
            "the server \(what) after the TLS handshake, without answering the upgrade "
                + "(servers that require a client certificate do this when none or an untrusted one was sent)")
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
            dialer?.cancel()
            dialer = nil
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
