import Foundation
import Logging
import SwitchboardCore

/// Reads one HTTP request on a freshly accepted socket (bounded and timed), routes it, runs the
/// authentication hook, and either upgrades to a ``WebSocketConnection`` or answers plain HTTP.
final class ServerHandshakeHandler: SocketChannelDelegate, @unchecked Sendable {
    // Safety: loop-confined; the async auth hook resumes on the same loop (executor preference).

    private let server: WebSocketServer
    private let channel: SocketChannel
    /// The peer's address while ``WebSocketServerConfiguration/maxConnectionsPerAddress`` counts
    /// it (nil when the cap is off).
    private let peer: PeerAddressKey?
    /// Unchecked for exclusive access at run time: a plain value that calls out to nothing.
    @exclusivity(unchecked) private var parser: HTTPRequestParser
    /// Cuts off the whole handshake: the request, `authenticate`, and the TLS handshake.
    private var timer: EventLoopTimer?
    private var done = false
    /// Whether this socket still counts toward the server's `maxConnections` as a handshake.
    private var counted = true
    /// The request is complete and `authenticate` is running.
    private var authenticating = false
    /// A plain HTTP request's body being read for ``WebSocketServer/handleHTTP(_:)``.
    private var body: PendingBody?
    /// The ``WebSocketServer/handleHTTP(_:)`` handler is running (cancelled at the timeout).
    private var httpTask: Task<Void, Never>?
    /// A body refused as too large is being read and dropped after the `413` (lingering
    /// close): how many more of its bytes the client still owes.
    private var draining: Int?
    /// The request's method once its head is read (a `HEAD` is answered without a body).
    private var method = "GET"

    /// How much of a body refused as too large is read and dropped after the `413`, so that a
    /// client still sending it reads the answer instead of a connection reset (closing a socket
    /// with unread bytes makes the kernel send a reset, which can destroy the answer before the
    /// client reads it). The socket closes once the announced body is in, at this many bytes,
    /// when the client closes, or at the handshake timeout, whichever comes first.
    static let drainLimit = 1 << 20

    /// A plain HTTP request whose body is still arriving.
    private struct PendingBody {
        let head: HTTPRequestHead
        var reader: HTTPBodyReader
        let handler: @Sendable (HTTPRequest) async -> HTTPResponse?
    }

    /// The peer's address, for ``WebSocketUpgradeRequest/remoteAddress``.
    private let remote: SocketAddress

    init(server: WebSocketServer, channel: SocketChannel, peer: PeerAddressKey?, remote: SocketAddress) {
        self.remote = remote
        self.server = server
        self.channel = channel
        self.peer = peer
        self.parser = HTTPRequestParser(limits: server.configuration.httpLimits)
    }

    func start() {
        channel.delegate = self
        timer = channel.loop.schedule(after: server.configuration.connection.handshakeTimeout) { [self] in
            guard !done else { return }
            if draining != nil {
                draining = nil
                channel.closeAfterFlush(linger: server.configuration.connection.handshakeTimeout)
                finish()
                return
            }
            server.logger.debug("handshake timed out")
            if let task = httpTask {
                httpTask = nil
                task.cancel()
                reject(HTTPResponse.error(status: 503, message: "the request handler timed out", type: .overloaded,
                                          code: "timeout"), reason: nil)
            } else if body != nil {
                body = nil
                reject(HTTPResponse.error(status: 408, message: "request body not received in time",
                                          type: .invalidRequest, code: "timeout"), reason: nil)
            } else if authenticating {
                reject(HTTPResponse.error(status: 503, message: "authentication timed out", type: .overloaded,
                                          code: "timeout"), reason: .authentication)
            } else {
                reject(HTTPResponse.error(status: 408, message: "request timeout", type: .invalidRequest,
                                          code: "timeout"), reason: .badRequest)
            }
        }
        do {
            try channel.activate { [self] error in
                if let error {
                    server.logger.debug("TLS handshake failed: \(error.message)")
                    server.counters.recordRejection(.tls, status: nil)
                    finish()
                }
            }
        } catch {
            channel.close()
            finish()
        }
    }

    /// A loopback-bound server answers only to loopback `Host` names (DNS rebinding).
    private var refusesNonLoopbackHosts: Bool { server.refusesNonLoopbackHosts }

    func channelRead(_ bytes: UnsafeRawBufferPointer) {
        guard !done else { return }
        if body != nil {
            receiveBody(bytes)
            return
        }
        if let budget = draining {
            let left = budget - bytes.count
            draining = left
            if left <= 0 { endDrain() }
            return
        }
        let result: HTTPParseResult<HTTPRequestHead>
        do {
            result = try parser.parse(bytes)
        } catch {
            reject(error.response, reason: .badRequest)
            return
        }
        guard case .complete(let head, let consumed) = result else { return }
        method = head.method
        let leftover = [UInt8](bytes[consumed...])
        // Stop reading until the request is decided (authenticate may take a while); the
        // handshake timer keeps running through authenticate.
        channel.setReading(false)
        handle(head, leftover: leftover)
    }

    private func handle(_ head: HTTPRequestHead, leftover: [UInt8]) {
        if refusesNonLoopbackHosts, !LoopbackHost.isLoopback(hostHeader: head.headers["Host"]) {
            reject(HTTPResponse.error(status: 403, message: "this server answers only to loopback host names",
                                      type: .permission, code: "host_not_allowed"), reason: .host)
            return
        }
        let kind: WebSocketRequestKind
        do {
            kind = try WebSocketServerHandshake.classify(head)
        } catch {
            reject(error.response ?? HTTPResponse.error(status: 400, message: error.description,
                                                         type: .invalidRequest, code: "bad_request"),
                   reason: .badRequest)
            return
        }
        switch consume kind {  // moved out, not copied: the request is about ten references
        case .plainHTTP(let head):
            // Plain HTTP answers (reason nil) are not counted as refused upgrades.
            switch server.httpHandler {
            case .request(let handler):
                readBody(of: head, leftover: leftover, handler: handler)
            case .head(let handler):
                reject(handler(head) ?? Self.notFound(head), reason: nil)
            case nil:
                reject(Self.notFound(head), reason: nil)
            }
        case .upgrade(var request):
            request.clientCertificate = channel.tlsPeerCertificate
            let remoteHost = remote.host
            request.remoteAddress = remoteHost == "?" ? nil : remoteHost
            guard let route = server.route(for: request.path) else {
                reject(HTTPResponse.error(status: 404, message: "no WebSocket route for \(request.path)",
                                          type: .notFound, code: "not_found"), reason: .notFound)
                return
            }
            if !server.configuration.originPolicy.allows(origin: request.origin, host: request.headers["Host"],
                                                         secure: server.configuration.tls != nil) {
                reject(HTTPResponse.error(status: 403, message: "origin not allowed", type: .permission,
                                          code: "origin_not_allowed"), reason: .origin)
                return
            }
            guard let authenticate = route.authenticate else {
                upgrade(request, route: route, userInfo: [:], expiresAt: nil, leftover: leftover)
                return
            }
            // The hook may be async; run it on this loop so we resume here. The handshake timer
            // bounds it: a hook still running then gets its socket answered 503 and closed.
            authenticating = true
            let loop = channel.loop
            Task(executorPreference: loop) { [self, request] in
                let decision = await authenticate(request)
                loop.execute { [self] in
                    guard !done, !channel.isClosed else { return }
                    switch decision {
                    case .accept(let userInfo, let expiresAt):
                        upgrade(request, route: route, userInfo: userInfo, expiresAt: expiresAt, leftover: leftover)
                    case .reject(let response):
                        reject(response, reason: .authentication)
                    }
                }
            }
        }
    }

    private static func notFound(_ head: HTTPRequestHead) -> HTTPResponse {
        HTTPResponse.error(status: 404, message: "no route for \(head.path)", type: .notFound, code: "not_found")
    }

    // MARK: Plain HTTP with a body (handleHTTP)

    /// Decides the body's framing, takes what of it came with the head, and either runs the
    /// handler (body complete) or reads on until it is, within the handshake timer.
    private func readBody(of head: HTTPRequestHead, leftover: [UInt8],
                          handler: @escaping @Sendable (HTTPRequest) async -> HTTPResponse?) {
        let framing: HTTPBodyFraming
        do {
            framing = try HTTPBodyFraming.decide(head, limit: server.configuration.maxHTTPBodySize)
        } catch {
            let owed = (HTTPBodyFraming.announcedLength(head) ?? Int.max) - leftover.count
            if error == .bodyTooLarge, owed > 0 {
                rejectDraining(error.response, owed: min(owed, Self.drainLimit))
            } else {
                reject(error.response, reason: nil)
            }
            return
        }
        guard case .length(let length) = framing else {
            runHTTPHandler(handler, HTTPRequest(head: head))
            return
        }
        var reader = HTTPBodyReader(length: length)
        reader.append(leftover)  // bytes beyond the body are ignored: no keep-alive
        guard !reader.isComplete else {
            runHTTPHandler(handler, HTTPRequest(head: head, body: reader.body))
            return
        }
        body = PendingBody(head: head, reader: reader, handler: handler)
        if HTTPBodyFraming.expectsContinue(head) { channel.write(HTTPBodyFraming.continueResponse) }
        channel.setReading(true)
    }

    /// Answers a body refused as too large, reads and drops the `owed` bytes the client still
    /// sends (fewer if it closes first, or the handshake timer fires), then closes.
    private func rejectDraining(_ response: HTTPResponse, owed: Int) {
        channel.write(response.bytes(answering: method))
        draining = owed
        channel.setReading(true)
    }

    private func endDrain() {
        draining = nil
        channel.closeAfterFlush(linger: server.configuration.connection.handshakeTimeout)
        finish()
    }

    private func receiveBody(_ bytes: UnsafeRawBufferPointer) {
        guard var pending = body else { return }
        body = nil  // no copy-on-write of the reader's storage while it grows
        pending.reader.append(bytes)
        guard pending.reader.isComplete else {
            body = pending
            return
        }
        channel.setReading(false)
        runHTTPHandler(pending.handler, HTTPRequest(head: pending.head, body: pending.reader.body))
    }

    /// Runs the handler on this loop (so it resumes here), answers and closes. The handshake
    /// timer still runs: a handler that outlives it is cancelled and its answer dropped.
    private func runHTTPHandler(_ handler: @escaping @Sendable (HTTPRequest) async -> HTTPResponse?,
                                _ request: HTTPRequest) {
        let loop = channel.loop
        httpTask = Task(executorPreference: loop) { [self, request] in
            let response = await handler(request)
            loop.execute { [self] in
                guard !done, httpTask != nil, !channel.isClosed else { return }
                httpTask = nil
                reject(response ?? Self.notFound(request.head), reason: nil)
            }
        }
    }

    private func upgrade(_ request: consuming WebSocketUpgradeRequest, route: WebSocketRoute,
                         userInfo: [String: String], expiresAt: Date?, leftover: [UInt8]) {
        let subprotocol = server.configuration.subprotocols.first { request.subprotocols.contains($0) }
        var deflate: PerMessageDeflateParameters?
        if route.compression, let compression = server.configuration.connection.compression {
            deflate = PerMessageDeflate.accept(offers: request.headers.values(for: "Sec-WebSocket-Extensions"),
                                               configuration: compression)
        }
        let response: [UInt8]
        do {
            response = try WebSocketServerHandshake.acceptResponse(for: request, subprotocol: subprotocol, deflate: deflate)
        } catch {
            reject(HTTPResponse.error(status: 400, message: error.description, type: .invalidRequest,
                                      code: "bad_request"), reason: .badRequest)
            return
        }
        done = true
        timer?.cancel()
        timer = nil
        counted = false  // from here the connection counts it, until it closes
        channel.write(response)
        channel.setReading(true)
        let connection = WebSocketConnection(channel: channel, role: .server, subprotocol: subprotocol,
                                             request: Self.retained(request),  // its last use: moved
                                             sharedConfiguration: server.sharedConnectionConfiguration,
                                             deflate: deflate, counters: server.counters, userInfo: userInfo)
        server.register(connection, peer: peer)
        switch route.handler {
        case .task(let handler):
            connection.start(leftover: leftover, authenticationExpiresAt: expiresAt)
            let server = self.server
            server.handlerStarted()
            Task(executorPreference: channel.loop) {
                await Self.run(handler, on: connection, server: server)
                server.handlerFinished()
            }
        case .callbacks(let callbacks):
            connection.start(leftover: leftover, callbacks: callbacks, authenticationExpiresAt: expiresAt)
        }
    }

    /// Runs a task route's handler, then closes the connection: 1000 when it returned, 1001 when
    /// it was cancelled, 1011 (logged) when it threw.
    ///
    /// Written so that what stays allocated while the handler is suspended is small: this
    /// function's frame holds only the handler's outcome, and the closing and logging, with
    /// their larger frames, live in ``finish(_:failure:server:)``, entered only after the
    /// handler has returned (idle memory per connection).
    private static func run(_ handler: @Sendable (isolated WebSocketConnection) async throws -> Void,
                            on connection: WebSocketConnection, server: WebSocketServer) async {
        var failure: (any Error)?
        connection.beginHandlerTask()           // on the loop: the task prefers it
        do {
            try await handler(connection)
        } catch {
            failure = error
        }
        connection.endHandlerTask()
        await finish(connection, failure: failure, server: server)
    }

    @inline(never)
    private static func finish(_ connection: WebSocketConnection, failure: (any Error)?,
                               server: WebSocketServer) async {
        guard let error = failure else {
            await connection.close()
            return
        }
        let cancelled = error is CancellationError || (error as? SwitchboardError)?.kind == .cancelled
        if cancelled {
            await connection.close(code: .goingAway, reason: "")
        } else if !(await connection.isOpen) {
            // Typically a send that failed because the peer went away: nothing to close.
            server.logger.debug("route handler threw after its connection closed", metadata: [
                "connection": "\(connection.id)", "error": "\(String(reflecting: error))",
            ])
        } else {
            server.logger.error("route handler threw; closing with 1011", metadata: [
                "connection": "\(connection.id)", "path": "\(connection.request?.path ?? "")",
                "error": "\(String(reflecting: error))",
            ])
            server.counters.metrics?.handlerFailed()
            await connection.close(code: .internalError, reason: "")
        }
    }

    /// The request as the connection keeps it: without the fields only the handshake needed
    /// (their values are in the request's own properties), in storage of exactly its size.
    static func retained(_ request: consuming WebSocketUpgradeRequest) -> WebSocketUpgradeRequest {
        request.head.headers = request.head.headers.removingFields(named: handshakeOnlyFields)  // exact-size storage
        return request
    }

    private static let handshakeOnlyFields = ["Upgrade", "Connection", "Sec-WebSocket-Key", "Sec-WebSocket-Version",
                                              "Sec-WebSocket-Extensions"]

    /// Answers `response` and closes. `reason` nil: a plain HTTP request answered, which is
    /// not counted as a refused upgrade.
    private func reject(_ response: HTTPResponse, reason: RejectionReason?) {
        guard !done else { return }
        if let reason { server.counters.recordRejection(reason, status: response.status) }
        channel.write(response.bytes(answering: method))
        channel.closeAfterFlush(linger: server.configuration.connection.handshakeTimeout)
        finish()
    }

    private func finish() {
        done = true
        timer?.cancel()
        timer = nil
        channel.delegate = nil
        if counted {
            counted = false
            server.socketReleased(from: peer)
        }
    }

    func channelEOF() {
        body = nil
        if draining != nil {
            endDrain()  // the answer may still be queued
            return
        }
        channel.close()
        finish()
    }

    func channelFailed(_ error: SwitchboardError) {
        finish()
    }

    func channelWritable() {}
}
