import Switchboard

/// What went wrong with a Redis command or connection. Never contains a password.
public struct RedisError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The class of failure; compare with the static members.
    public struct Kind: Sendable, Hashable, CustomStringConvertible {
        let name: String
        public var description: String { name }

        /// Redis answered the command with an error reply (`-ERR …`, `-WRONGTYPE …`); the
        /// connection is fine.
        public static let server = Kind(name: "server")
        /// The server refused the credentials (`AUTH`) or the database (`SELECT`).
        public static let authentication = Kind(name: "authentication")
        /// Not connected now (Redis unreachable; the client is waiting to reconnect). The
        /// command was not sent.
        public static let unavailable = Kind(name: "unavailable")
        /// The connection was lost after the command was sent: it may or may not have run.
        public static let connectionLost = Kind(name: "connectionLost")
        /// Redis sent something that is not RESP2, or above the parser's limits; the
        /// connection was closed.
        public static let protocolError = Kind(name: "protocolError")
        /// No reply within ``RedisConfiguration/commandTimeout``; the connection was closed.
        public static let timedOut = Kind(name: "timedOut")
        /// Too many commands waiting (``RedisConfiguration/maximumPendingCommands``) or too many
        /// bytes queued for the socket: the command was not sent.
        public static let limitExceeded = Kind(name: "limitExceeded")
        /// The client was closed.
        public static let closed = Kind(name: "closed")
        /// A bad argument or URL.
        public static let invalidArgument = Kind(name: "invalidArgument")
    }

    /// The class of failure.
    public let kind: Kind
    /// Human-readable detail (for `.server`, Redis's own message).
    public let message: String
    /// The transport error behind `.unavailable` and `.connectionLost`, when there was one.
    public let underlying: SwitchboardError?

    /// Makes an error.
    public init(kind: Kind, message: String, underlying: SwitchboardError? = nil) {
        self.kind = kind
        self.message = message
        self.underlying = underlying
    }

    public var description: String { "RedisError.\(kind): \(message)" }
}

extension RedisError {
    /// A `redis-cluster://` URL given to ``RedisClient`` or ``RedisSubscriber``: refused at once
    /// rather than talking to the first seed as if it were a single server (which would answer
    /// most keys with `MOVED`). ``RedisClusterClient`` is the client for a cluster.
    static func clusterNotSupported(_ url: RedisURL) -> RedisError {
        RedisError(kind: .invalidArgument,
                   message: "\(url): a Redis Cluster URL needs RedisClusterClient (this client talks to one server); "
                       + "use redis:// or redis-sentinel:// here")
    }
}
