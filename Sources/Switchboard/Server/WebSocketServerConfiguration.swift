import SwitchboardCore

/// Everything a ``WebSocketServer`` needs, in one value.
public struct WebSocketServerConfiguration: Sendable {
    /// Address to bind (default `127.0.0.1`; use `0.0.0.0` or `::` to listen on every interface).
    public var host: String = "127.0.0.1"
    /// Port to bind; 0 picks an ephemeral port, readable as ``WebSocketServer/port`` after start.
    public var port: Int = 0
    /// PEM certificate chain and key; nil serves plain `ws://`.
    public var tls: TLSServerConfiguration?
    /// Bounds on the HTTP upgrade request (default 16 KiB of head, 100 header fields).
    public var httpLimits: HTTPParseLimits = .default
    /// The largest body a plain HTTP request may carry to ``WebSocketServer/handleHTTP(_:)``
    /// (default 16 KiB: JSON API calls such as posting a chat message are well under 1 KiB,
    /// and the server holds the whole body in memory before the handler runs).
    ///
    /// The body is read by `Content-Length` only (see `HTTPBodyFraming`): a larger announced
    /// length is answered `413` (`body_too_large`) before any body byte is read; a `POST`,
    /// `PUT` or `PATCH` without a length, and any `Transfer-Encoding` (chunked bodies are not
    /// read), get `411` (`length_required`); a malformed or conflicting length gets `400`.
    /// The body must arrive within ``WebSocketConfiguration/handshakeTimeout`` (else `408`).
    /// Not used by the synchronous ``WebSocketServer/onHTTPRequest(_:)``, which sees no body.
    public var maxHTTPBodySize: Int = 16_384
    /// Limits and timeouts of each accepted connection (message size, buffers, close timeout,
    /// and ``WebSocketConfiguration/handshakeTimeout``, which cuts off slow upgrade requests).
    public var connection: WebSocketConfiguration = .default
    /// Sockets beyond this are answered `503` and closed (default 10,000). Every accepted socket
    /// counts from accept to close: upgraded connections, and sockets still sending their
    /// request or waiting on `authenticate`.
    public var maxConnections: Int = 10_000
    /// Sockets from one IP address beyond this are refused (default nil: no cap per address).
    ///
    /// Counted like ``maxConnections``, from accept to close, per peer IP address: the IPv4
    /// address, or the full IPv6 address (an IPv4-mapped IPv6 address counts as its IPv4
    /// address). Over it, a plain listener answers `429` (error code `too_many_connections`)
    /// and closes; a TLS listener closes the TCP connection at once, before any TLS handshake
    /// (a plain-text answer means nothing to a TLS client, and the handshake is the costly
    /// part). Each refusal counts in ``WebSocketServer/Statistics/rejectedConnections``.
    ///
    /// Off by default because the library cannot know its clients: many users behind one NAT,
    /// proxy or load balancer share an address, and a cap that is right for browsers on the
    /// open internet would refuse them. Set it on servers that face clients directly (the
    /// `chat-room` and `agent-stream` examples default to 256) so that one address cannot take
    /// every place of ``maxConnections``. A value below 1 is treated as nil (off).
    public var maxConnectionsPerAddress: Int?
    /// Which web pages may open a WebSocket here, by their `Origin` (default `OriginPolicy.any`:
    /// the application decides). Upgrades from another origin get `403` with the JSON error body
    /// (code `origin_not_allowed`); requests without an `Origin` header (programs, not browser
    /// pages) are allowed. A server reachable from browsers should use
    /// `OriginPolicy.sameOrigin` or `OriginPolicy.exactly(_:)`, as the example servers do.
    public var originPolicy: OriginPolicy = .any
    /// The origins allowed, as a list: setting it sets ``originPolicy`` to
    /// `OriginPolicy.exactly(_:)` (nil: `OriginPolicy.any`).
    @available(*, deprecated, message: "use originPolicy (.exactly, .sameOrigin(also:) or .any)")
    public var allowedOrigins: [String]? {
        get { allowedOriginList }
        set {
            allowedOriginList = newValue
            originPolicy = newValue.map { .exactly($0) } ?? .any
        }
    }
    private var allowedOriginList: [String]?
    /// Whether a server bound to a loopback address (`127.0.0.1`, `::1`, `localhost`) refuses
    /// requests whose `Host` is not a loopback name or address, with `403` (code
    /// `host_not_allowed`) — upgrades and plain HTTP alike. Default true: this is the defence
    /// against DNS rebinding, where a web page re-points its own name at 127.0.0.1 to reach a
    /// server on the user's machine (its `Origin` then matches its `Host`, so an origin check
    /// alone does not stop it). Has no effect on a server bound to another address. Turn it off
    /// behind a reverse proxy on the same machine that forwards the public `Host`.
    public var refusesNonLoopbackHosts = true
    /// Subprotocols the server speaks, in preference order; the first one the client also
    /// offers is selected.
    public var subprotocols: [String] = []
    /// Event loops (default: one per core).
    public var loopCount: Int?
    /// Spreads topics over several server processes (for example `RedisTopicBackplane` from
    /// `SwitchboardRedis`); nil (the default) keeps every topic inside this process.
    public var backplane: (any TopicBackplane)?
    /// Numbered topics with a bounded replay buffer each, for subscribers that resume after a
    /// reconnect (``WebSocketServer/subscribe(_:to:resumingAfter:announce:)``); nil (the default) keeps
    /// no history.
    public var topicReplay: TopicReplayConfiguration?
    /// `listen` backlog (default 4096: bursts of thousands of connects don't get refused).
    public var backlog: Int32 = 4096
    /// How long ``WebSocketServer/run()`` waits at shutdown for connections to finish their
    /// close handshake (1001) and for route handlers to return, before dropping what is left
    /// (default 10 s; keep it below a `ServiceGroup`'s `maximumGracefulShutdownDuration`).
    public var shutdownTimeout: Duration = .seconds(10)

    /// Listens on `host`:`port` (port 0: an ephemeral port, see ``WebSocketServer/listeningPort``);
    /// every other setting has its default.
    public init(host: String = "127.0.0.1", port: Int = 0) {
        self.host = host
        self.port = port
    }
}
