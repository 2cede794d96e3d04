import Switchboard

/// How a ``RedisClient``, ``RedisSubscriber`` or ``RedisClusterClient`` (for each node)
/// connects, reconnects and bounds its memory.
/// The defaults suit a Redis on the local network.
public struct RedisConfiguration: Sendable {
    /// Limit for the TCP connection (each address) and then for the TLS handshake. Default 5 s.
    public var connectTimeout: Duration = .seconds(5)
    /// A command without a reply for this long closes the connection (every waiting command
    /// fails with `.timedOut`, and the client reconnects). Detected within twice this. Default 10 s.
    public var commandTimeout: Duration = .seconds(10)
    /// First delay before reconnecting after a failure; it doubles per failed attempt, up to
    /// ``maximumReconnectDelay``, with jitter (a random 50–100 % of it). Default 100 ms.
    public var initialReconnectDelay: Duration = .milliseconds(100)
    /// Longest delay between reconnection attempts. Default 5 s.
    public var maximumReconnectDelay: Duration = .seconds(5)
    /// Commands sent and not yet answered, or waiting for the connection, at most. Beyond it a
    /// command fails at once with `.limitExceeded`. Default 100,000.
    public var maximumPendingCommands = 100_000
    /// Bytes queued for the socket at most (Redis not reading). Default 16 MiB.
    public var maximumOutboundBytes = 16 << 20
    /// Limits of the reply parser (a reply above them closes the connection).
    public var parseLimits = RESPParseLimits()
    /// TLS for `rediss://` and `rediss-sentinel://` URLs (to the sentinels and to the master):
    /// verification of the chain and of the host name (SNI sent) with the system's trust store
    /// by default, and no ALPN. Ignored for `redis://` and `redis-sentinel://`.
    public var tls = TLSConfiguration(alpnProtocols: [])
    /// Limit for a sentinel's answer to `SENTINEL get-master-addr-by-name` (after
    /// ``connectTimeout`` for its connection); beyond it the next sentinel is asked. Sentinels
    /// answer from memory at once: the default, 2 s, only allows for a loaded machine.
    public var sentinelTimeout: Duration = .seconds(2)
    /// `CLIENT SETNAME` value sent after connecting, when set (shows in `CLIENT LIST`).
    public var clientName: String?
    /// Redis Cluster (``RedisClusterClient``): how long one command may be retried while its
    /// shard cannot serve it (`TRYAGAIN`, `CLUSTERDOWN`, its master unreachable), with waits of
    /// 50 ms doubling to 1 s and the slot map refreshed meanwhile; then the command fails with
    /// `.unavailable`. The default, 10 s, outlasts a failover of a cluster with
    /// `cluster-node-timeout` up to about 5 s (the replica is promoted a little after the node
    /// timeout); with Redis's default timeout, 15 s, commands fail during a failover unless this
    /// is raised above it.
    public var clusterRetryBudget: Duration = .seconds(10)
    /// Redis Cluster (``RedisClusterClient``): `MOVED` and `ASK` redirections followed for one
    /// command at most; one more fails it with `.unavailable`. A slot moves once per resharding
    /// step, so a command needs one or two; the default, 16 (as redis-py's cluster client),
    /// only stops a cluster whose nodes disagree from bouncing a command for ever.
    public var maximumClusterRedirects = 16

    /// The defaults.
    public init() {}
}
