import Synchronization
import SwitchboardCore

/// Every limit and timeout of a WebSocket connection, in one value (client and server).
public struct WebSocketConfiguration: Sendable, Equatable {
    /// Frame and message size limits enforced by the protocol core (defaults 16 MiB each:
    /// large enough for real payloads, small enough that one peer cannot exhaust memory).
    public var protocolLimits: WebSocketProtocolLimits = .default

    /// Longest line accepted by the newline-delimited API (default 1 MiB). A longer line fails
    /// the connection with close code 1009 rather than growing a buffer without bound.
    public var maxLineLength: Int = 1 << 20

    /// Whether empty lines are delivered by ``WebSocketConnection/lines()`` (default: skipped,
    /// they carry nothing in newline-delimited JSON).
    public var emptyLines: LineBuffer.EmptyLinePolicy = .skip

    /// Bytes of received, undelivered messages above which the connection stops reading the
    /// socket (default 1 MiB); reading resumes below ``inboundLowWaterMark`` (default 256 KiB).
    public var inboundHighWaterMark: Int = 1 << 20
    /// Bytes of received, undelivered messages at or below which a connection that stopped
    /// reading the socket reads again (default 256 KiB); see ``inboundHighWaterMark``.
    public var inboundLowWaterMark: Int = 256 << 10

    /// Bytes queued for the socket above which `send` waits (or fails, see ``sendPolicy``),
    /// `sendNow` returns ``WebSocketSendStatus/backpressure`` and a callback route's connection
    /// stops reading the peer (default 1 MiB); waiting senders resume, and reading resumes, at
    /// or below ``outboundLowWaterMark`` (default 256 KiB). Every byte for the socket counts:
    /// data, pings, pongs, close frames, the HTTP handshake.
    public var outboundHighWaterMark: Int = 1 << 20
    /// Bytes queued for the socket at or below which waiting senders resume and a callback
    /// route's connection reads the peer again (default 256 KiB); see ``outboundHighWaterMark``.
    public var outboundLowWaterMark: Int = 256 << 10

    /// The hard cap of the outbound queue, in bytes (default 16 MiB): a message offered with
    /// ``WebSocketConnection/sendNow(_:compress:)`` or a ``WebSocketConnection/ping(_:)`` while more
    /// than this is queued is refused with ``SwitchboardError`` `.limitExceeded` (close code
    /// 1013), nothing queued. `send` never reaches it: it waits below the high-water mark
    /// first. So a connection's outbound queue holds at most this plus one message.
    public var outboundLimit: Int = 16 << 20

    /// What `send` does when the outbound queue is above its high-water mark.
    public enum SendPolicy: Sendable, Equatable {
        /// Suspend the sender until the queue drains (default): no data lost, no unbounded growth.
        case suspend
        /// Throw ``SwitchboardError`` of kind `.limitExceeded` at once.
        case fail
    }
    /// What `send` does above ``outboundHighWaterMark`` (default ``SendPolicy/suspend``).
    public var sendPolicy: SendPolicy = .suspend

    /// How long to wait for the peer's close frame (and, for clients, the server's TCP close)
    /// after we sent ours, before dropping the TCP connection (default 10 s, RFC 6455 §7.1.1
    /// leaves it to the implementation).
    public var closeTimeout: Duration = .seconds(10)

    /// Keepalive: how often to send a ping (default 20 s: under the idle timeouts of common NATs
    /// and load balancers, which start around 30–60 s). nil disables keepalive.
    public var pingInterval: Duration? = .seconds(20)

    /// How long to wait for the pong of a keepalive ping before declaring the peer dead and
    /// closing with 1011 (default 20 s). The connection's error is then `.timedOut`.
    public var pongTimeout: Duration = .seconds(20)

    /// How long bytes may wait in the outbound queue while the peer takes none of them before
    /// the connection is aborted (default 20 s; nil turns it off): TCP is reset (`SO_LINGER` 0,
    /// the kernel's send buffer dropped too), every buffer is released, and the connection ends
    /// with the local status 1006 and a ``SwitchboardError`` of kind `.timedOut`, counted in
    /// ``WebSocketServer/Statistics/writeStallCloses``. It is the deadline of a peer that stops
    /// reading: without it, such a peer (which never answers a keepalive ping either, but
    /// whose pong we are not reading, so that wait restarts) holds its queues, kernel buffers
    /// and descriptor for ever.
    ///
    /// Progress is what counts, not emptiness: a write that takes bytes, or the peer
    /// acknowledging bytes the kernel holds for it (`SIOCOUTQ` shrinking: the kernel wakes a
    /// writer only once a good part of its send buffer is free), so a slow reader that keeps
    /// reading is never closed by it. The check runs only while bytes are queued (one timer per such
    /// connection, ticking at a quarter of the timeout), so a connection is closed between the
    /// timeout and 1.25 × the timeout after its last progress. 20 s, like the keepalive: far
    /// beyond any pause of a live peer on a congested path (TCP's own retransmission backs off
    /// for longer only on a path that is already failing), short enough that a silent peer is
    /// gone before it matters.
    public var writeStallTimeout: Duration? = .seconds(20)

    /// How long the opening handshake (TCP connect excluded for clients) may take (default 10 s).
    public var handshakeTimeout: Duration = .seconds(10)

    /// permessage-deflate (RFC 7692): nil (the default) speaks the uncompressed protocol; set
    /// it to offer compression (client) or accept it (server). `PerMessageDeflateConfiguration`
    /// (in `SwitchboardCore`) explains the modes; its default shares one zlib stream per event loop and keeps no zlib
    /// memory per connection. Off by default because compression costs CPU and, mixed with
    /// secrets, leaks them (CRIME/BREACH): opt in knowingly.
    public var compression: PerMessageDeflateConfiguration?

    /// Creates a configuration with every default; change the properties you need.
    public init() {}

    /// Every default: 16 MiB frames and messages, 1 MiB lines, 1 MiB / 256 KiB water marks,
    /// 16 MiB outbound limit, 20 s pings, pong timeout and write-stall timeout, 10 s handshake
    /// and close timeouts, no compression.
    public static let `default` = WebSocketConfiguration()
}

/// A ``WebSocketConfiguration`` shared by reference between the connections of one server.
final class SharedWebSocketConfiguration: Sendable {
    let value: WebSocketConfiguration
    /// The outbound queue's marks, shared by every connection's channel.
    let outboundLimits: OutboundLimits
    init(_ value: WebSocketConfiguration) {
        self.value = value
        outboundLimits = OutboundLimits(highWaterMark: value.outboundHighWaterMark,
                                        lowWaterMark: value.outboundLowWaterMark, limit: value.outboundLimit,
                                        writeStallTimeout: value.writeStallTimeout)
    }
}

/// A ``SocketChannel``'s outbound water marks, limit and write-stall deadline (see
/// ``SocketChannel/highWaterMark``): one instance per configuration, referenced by every channel
/// that uses it, which also add up there the bytes they hold queued (``queuedBytes``).
final class OutboundLimits: Sendable {
    let highWaterMark: Int
    let lowWaterMark: Int
    let limit: Int
    /// The interval of the write-stall check, a quarter of
    /// ``WebSocketConfiguration/writeStallTimeout`` (nil: no deadline): a channel whose queue
    /// made no progress for more than four of them is aborted.
    let writeStallTick: Duration?
    /// Bytes left queued after the last flush, summed over the channels using these limits
    /// (each adds its own after every flush that changes it, and takes it back when it
    /// closes): what ``WebSocketServer/Statistics/queuedBytes`` reports.
    let queuedBytes = Atomic<Int>(0)

    init(highWaterMark: Int, lowWaterMark: Int, limit: Int, writeStallTimeout: Duration? = nil) {
        self.highWaterMark = highWaterMark
        self.lowWaterMark = lowWaterMark
        self.limit = limit
        self.writeStallTick = writeStallTimeout.map { max($0 / 4, .milliseconds(1)) }
    }

    /// 1 MiB high, 256 KiB low, 16 MiB limit, no write-stall deadline: the channel's own
    /// defaults before a connection sets its own (a handshake has its own timeout).
    static let `default` = OutboundLimits(highWaterMark: 1 << 20, lowWaterMark: 256 << 10, limit: 16 << 20)
}
