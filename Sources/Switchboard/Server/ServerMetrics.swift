#if MetricsSupport
import CoreMetrics
#endif
import SwitchboardCore

/// Why the server refused a socket or an upgrade request: the `reason` label of
/// `switchboard_connections_rejected_total`. A fixed set, so the label stays bounded.
enum RejectionReason: String, CaseIterable, Sendable {
    /// `maxConnections` reached (503; a TCP reset on a TLS listener).
    case capacity
    /// `maxConnectionsPerAddress` reached for the peer's address (429; a TCP reset on a TLS
    /// listener).
    case addressCapacity = "address_capacity"
    /// The server is shutting down (503; a TCP reset on a TLS listener).
    case shuttingDown = "shutting_down"
    /// The request was not a valid upgrade, or timed out (400, 405, 408, 426, 431…).
    case badRequest = "bad_request"
    /// No route for the path (404).
    case notFound = "not_found"
    /// `Origin` refused by the `originPolicy` (403).
    case origin
    /// A loopback-bound server got a non-loopback `Host` (403, DNS rebinding).
    case host
    /// The route's `authenticate` hook refused, or did not answer in time.
    case authentication
    /// The TLS handshake failed.
    case tls
}

/// The server's swift-metrics instruments (with the `MetricsSupport` trait), made once per
/// server from its factory. Labels are bounded: no per-connection or per-path label, close codes
/// grouped (`3xxx`, `4xxx`, `other` beyond the registered ones), HTTP statuses from the small
/// set the server answers with.
///
/// Without the trait this type has no instruments and is never created: every call site reads
/// `counters.metrics?`, so the cost is one nil check.
final class ServerMetrics: Sendable {
    #if MetricsSupport
    private let factory: any MetricsFactory
    private let connectionsOpen: Meter
    private let connectionsAccepted: Counter
    private let rejected: [RejectionReason: Counter]
    private let messagesIn: Counter
    private let messagesOut: Counter
    private let bytesIn: Counter
    private let bytesOut: Counter
    private let backpressurePauses: Counter
    private let slowConsumerCloses: Counter
    private let writeStallCloses: Counter
    private let pingRoundTrip: Timer
    private let handlerErrors: Counter
    /// Instruments with a label taken from a bounded set, made on first use.
    private let closes = Locked<[String: Counter]>([:])
    private let handshakeFailures = Locked<[String: Counter]>([:])

    init(factory: any MetricsFactory) {
        self.factory = factory
        connectionsOpen = Meter(label: "switchboard_connections_open", factory: factory)
        connectionsAccepted = Counter(label: "switchboard_connections_accepted_total", factory: factory)
        var rejected: [RejectionReason: Counter] = [:]
        for reason in RejectionReason.allCases {
            rejected[reason] = Counter(label: "switchboard_connections_rejected_total",
                                       dimensions: [("reason", reason.rawValue)], factory: factory)
        }
        self.rejected = rejected
        messagesIn = Counter(label: "switchboard_messages_total", dimensions: [("direction", "in")], factory: factory)
        messagesOut = Counter(label: "switchboard_messages_total", dimensions: [("direction", "out")], factory: factory)
        bytesIn = Counter(label: "switchboard_message_bytes_total", dimensions: [("direction", "in")], factory: factory)
        bytesOut = Counter(label: "switchboard_message_bytes_total", dimensions: [("direction", "out")], factory: factory)
        backpressurePauses = Counter(label: "switchboard_backpressure_pauses_total", factory: factory)
        slowConsumerCloses = Counter(label: "switchboard_slow_consumer_closes_total", factory: factory)
        writeStallCloses = Counter(label: "switchboard_write_stall_closes_total", factory: factory)
        pingRoundTrip = Timer(label: "switchboard_ping_round_trip", factory: factory)
        handlerErrors = Counter(label: "switchboard_handler_errors_total", factory: factory)
    }

    func connectionOpened() {
        connectionsAccepted.increment()
        connectionsOpen.increment()
    }

    func connectionClosed(code: WebSocketCloseCode) {
        connectionsOpen.decrement()
        counter(in: closes, label: "switchboard_closes_total", dimension: "code", value: Self.codeLabel(code))
            .increment()
    }

    func rejected(_ reason: RejectionReason, status: Int?) {
        rejected[reason]?.increment()
        let statusLabel = status.map { Self.statusLabel($0) } ?? reason.rawValue
        counter(in: handshakeFailures, label: "switchboard_handshake_failures_total", dimension: "status",
                value: statusLabel).increment()
    }

    func messageIn(bytes: Int) {
        messagesIn.increment()
        bytesIn.increment(by: Int64(bytes))
    }

    func messageOut(bytes: Int) {
        messagesOut.increment()
        bytesOut.increment(by: Int64(bytes))
    }

    func backpressurePaused() { backpressurePauses.increment() }
    func slowConsumerClosed() { slowConsumerCloses.increment() }
    func writeStallClosed() { writeStallCloses.increment() }
    func handlerFailed() { handlerErrors.increment() }
    func pingAnswered(after rtt: Duration) { pingRoundTrip.recordNanoseconds(Int64(clamping: rtt.nanosecondsClamped)) }

    private func counter(in cache: Locked<[String: Counter]>, label: String, dimension: String,
                         value: String) -> Counter {
        cache.withLock { cached in
            if let c = cached[value] { return c }
            let c = Counter(label: label, dimensions: [(dimension, value)], factory: factory)
            cached[value] = c
            return c
        }
    }
    #else
    func connectionOpened() {}
    func connectionClosed(code: WebSocketCloseCode) {}
    func rejected(_ reason: RejectionReason, status: Int?) {}
    func messageIn(bytes: Int) {}
    func messageOut(bytes: Int) {}
    func backpressurePaused() {}
    func slowConsumerClosed() {}
    func writeStallClosed() {}
    func handlerFailed() {}
    func pingAnswered(after rtt: Duration) {}
    #endif

    /// The `code` label of a close: registered codes by number, the ranges for applications and
    /// libraries as `3xxx` and `4xxx`, anything else `other`.
    static func codeLabel(_ code: WebSocketCloseCode) -> String {
        switch code.rawValue {
        case 1000...1015: return String(code.rawValue)
        case 3000...3999: return "3xxx"
        case 4000...4999: return "4xxx"
        default: return "other"
        }
    }

    /// The `status` label of a refused upgrade: the statuses the server answers with by number,
    /// anything an `authenticate` hook chose outside them grouped by class (`4xx`, `5xx`).
    static func statusLabel(_ status: Int) -> String {
        switch status {
        case 400, 401, 403, 404, 405, 408, 413, 426, 429, 431, 500, 503: return String(status)
        case 400...499: return "4xx"
        case 500...599: return "5xx"
        default: return "other"
        }
    }
}
