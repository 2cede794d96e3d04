#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A client byte stream without WebSocket: TCP, optionally TLS (verified as for `wss`, with SNI),
/// on one ``EventLoop``. The transport of the package's other protocols (the Redis client);
/// `package`, not public API.
///
/// Loop-confined: the callbacks run on ``loop`` and every method must be called there.
/// Writes go through the channel's bounded outbound queue; ``write(_:)`` refuses bytes above its
/// limit, so a peer that stops reading cannot grow our memory.
package final class StreamConnection: SocketChannelDelegate, @unchecked Sendable {
    // Safety: every member is touched only on `loop`'s thread.

    /// The loop the connection lives on.
    package let loop: EventLoop
    private var channel: SocketChannel?
    /// Bytes arrived (valid during the call only).
    package var onRead: ((UnsafeRawBufferPointer) -> Void)?
    /// The connection ended: nil for an orderly end (EOF), else the error. Called once.
    package var onClose: ((SwitchboardError?) -> Void)?

    private init(loop: EventLoop) { self.loop = loop }

    /// Connects to `host:port` (TLS when `tls` is given, verified against `host` or the
    /// configuration's `serverNameOverride`). `timeout` covers the TCP connection of each
    /// address and then the TLS handshake; the connection lives on `loop`. Throws ``SwitchboardError`` (dns, connect, timedOut,
    /// tls, certificatePinning, cancelled). Writes are refused once `outboundLimit` bytes wait;
    /// a peer that takes none of the queued bytes for `writeStallTimeout` is reset (nil: never).
    package static func connect(host: String, port: Int, tls: TLSConfiguration?, timeout: Duration,
                                outboundLimit: Int = 16 << 20, writeStallTimeout: Duration? = .seconds(20),
                                on loop: EventLoop) async throws -> StreamConnection {
        let bare = SocketAddress.hostWithoutBrackets(host)
        let addresses = try await SocketAddress.resolve(host: bare, port: port)
        try Task.checkCancellation()
        let context: TLSContext?
        do {
            context = try tls.map(TLSContextCache.client)
        } catch {
            throw SwitchboardError.tls(error)
        }
        let connection = StreamConnection(loop: loop)
        let attempt = StreamConnectAttempt()
        let high = max(1, min(1 << 20, outboundLimit))
        // A peer that stops reading is reset after `writeStallTimeout`, as WebSocket connections are.
        let limits = OutboundLimits(highWaterMark: high, lowWaterMark: high / 4, limit: max(high, outboundLimit),
                                    writeStallTimeout: writeStallTimeout)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<StreamConnection, Error>) in
                loop.execute {
                    attempt.start(connection: connection, addresses: addresses, target: "\(host):\(port)",
                                  serverName: tls?.serverNameOverride ?? bare, context: context,
                                  timeout: timeout, limits: limits, continuation: c)
                }
            }
        } onCancel: {
            loop.execute { attempt.finish(.failure(.cancelled)) }
        }
    }

    fileprivate func adopt(_ channel: SocketChannel) {
        self.channel = channel
        channel.delegate = self
    }

    /// Queues `bytes`; false (nothing queued) when the outbound queue is over its limit.
    @discardableResult
    package func write(_ bytes: [UInt8]) -> Bool {
        guard let channel, !channel.isClosed else { return false }
        return channel.append { $0.append(contentsOf: bytes) } != .overLimit
    }

    /// Whether the outbound queue is at or under its high-water mark.
    package var isWritable: Bool { (channel?.pendingByteCount ?? 0) <= (channel?.highWaterMark ?? 0) }

    /// Bytes queued and not yet written.
    package var pendingByteCount: Int { channel?.pendingByteCount ?? 0 }

    /// Closes the connection (queued bytes are written first, for at most `linger`);
    /// ``onClose`` is not called.
    package func close(linger: Duration = .seconds(2)) {
        onClose = nil
        onRead = nil
        guard let channel else { return }
        self.channel = nil
        channel.closeAfterFlush(linger: linger)
    }

    func channelRead(_ bytes: UnsafeRawBufferPointer) { onRead?(bytes) }

    func channelEOF() { end(nil) }

    func channelFailed(_ error: SwitchboardError) { end(error) }

    func channelWritable() {}

    private func end(_ error: SwitchboardError?) {
        let handler = onClose
        onClose = nil
        onRead = nil
        channel?.close()
        channel = nil
        handler?(error)
    }
}

/// One connection attempt of ``StreamConnection/connect(host:port:tls:timeout:outboundLimit:writeStallTimeout:on:)``:
/// the dial, then the TLS handshake. Loop-confined.
private final class StreamConnectAttempt: @unchecked Sendable {
    // Safety: touched only on the connection's loop.
    private var continuation: CheckedContinuation<StreamConnection, Error>?
    private var connection: StreamConnection?
    private var dialer: TCPDialer?
    private var channel: SocketChannel?
    private var timer: EventLoopTimer?
    private var cancelled = false

    func start(connection: StreamConnection, addresses: [SocketAddress], target: String, serverName: String,
               context: TLSContext?, timeout: Duration, limits: OutboundLimits,
               continuation: CheckedContinuation<StreamConnection, Error>) {
        guard !cancelled else {
            continuation.resume(throwing: SwitchboardError.cancelled)
            return
        }
        self.continuation = continuation
        self.connection = connection
        let loop = connection.loop
        let dialer = TCPDialer(loop: loop, addresses: addresses, timeout: timeout, target: target)
        self.dialer = dialer
        dialer.start { [self] result in
            self.dialer = nil
            switch result {
            case .failure(let error):
                finish(.failure(error))
            case .success(let fd):
                var session: TLSSession?
                if let context {
                    do {
                        session = try TLSSession(clientWith: context, serverName: serverName)
                    } catch let error as TLSError {
                        Socket.close(fd)
                        finish(.failure(.tls(error)))
                        return
                    } catch {
                        Socket.close(fd)
                        finish(.failure(.tls("\(error)")))
                        return
                    }
                }
                let channel = SocketChannel(loop: loop, fd: fd, tls: session)
                channel.limits = limits
                self.channel = channel
                timer = loop.schedule(after: timeout) { [self] in finish(.failure(.timedOut("TLS handshake with \(target)"))) }
                do {
                    try channel.activate { [self] error in
                        if let error { finish(.failure(error)) } else { finish(.success(channel)) }
                    }
                } catch let error as SocketError {
                    finish(.failure(.io(error)))
                } catch {
                    finish(.failure(.tls("\(error)")))
                }
            }
        }
    }

    func finish(_ result: Result<SocketChannel, SwitchboardError>) {
        cancelled = true
        timer?.cancel()
        timer = nil
        guard let c = continuation, let connection else { return }
        continuation = nil
        self.connection = nil
        switch result {
        case .success(let channel):
            self.channel = nil
            connection.adopt(channel)
            c.resume(returning: connection)
        case .failure(let error):
            dialer?.cancel()
            dialer = nil
            channel?.close()
            channel = nil
            c.resume(throwing: error)
        }
    }
}
