import Logging
import Switchboard

/// Asks sentinels for the address of a master (`SENTINEL get-master-addr-by-name`), one
/// short-lived connection per sentinel asked, each bounded by
/// ``RedisConfiguration/connectTimeout`` and then ``RedisConfiguration/sentinelTimeout``.
enum RedisSentinelDiscovery {
    /// The master's address and the index of the sentinel that named it.
    struct Found: Sendable {
        var master: RedisURL.Address
        var sentinel: Int
    }

    /// Asks the sentinels in turn, starting with `firstAsked` (the one that answered last),
    /// until one names the master; `.unavailable` listing why each failed otherwise.
    static func master(of sentinels: RedisURL.Sentinels, firstAsked: Int, useTLS: Bool,
                       configuration: RedisConfiguration, loop: EventLoop) async -> Result<Found, RedisError> {
        let count = sentinels.addresses.count
        guard count > 0 else {
            return .failure(RedisError(kind: .unavailable, message: "the Sentinel URL lists no sentinel"))
        }
        var command: [UInt8] = []
        var replies = 1
        if let password = sentinels.password {
            let args = [Array("AUTH".utf8)] + (sentinels.username.map { [Array($0.utf8)] } ?? []) + [Array(password.utf8)]
            RESPEncoder.append(command: args, to: &command)
            replies += 1
        }
        RESPEncoder.append(command: ["SENTINEL", "get-master-addr-by-name", sentinels.masterName].map { Array($0.utf8) },
                           to: &command)
        var reasons: [String] = []
        for step in 0..<count {
            if Task.isCancelled {
                return .failure(RedisError(kind: .unavailable, message: "cancelled while asking the sentinels"))
            }
            let index = (max(0, firstAsked) + step) % count
            let sentinel = sentinels.addresses[index]
            switch await exchange(with: sentinel, useTLS: useTLS, bytes: command, replies: replies,
                                  configuration: configuration, loop: loop) {
            case .failure(let error):
                reasons.append("\(sentinel): \(error.message)")
            case .success(let values):
                if let refusal = values.dropLast().first(where: { if case .error = $0 { true } else { false } }),
                   case .error(let message) = refusal {
                    reasons.append("\(sentinel) refused AUTH: \(message)")
                    continue
                }
                switch values.last {
                case .array(let items) where items.count == 2:
                    if let host = items[0].string, !host.isEmpty, host.utf8.count <= 255,
                       let portText = items[1].string, portText.utf8.count <= 5,
                       portText.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
                       let port = Int(portText), (1...65535).contains(port) {
                        return .success(Found(master: RedisURL.Address(host: host, port: port), sentinel: index))
                    }
                    reasons.append("\(sentinel): an address that is not host and port")
                case .error(let message):
                    reasons.append("\(sentinel): \(message)")
                default:
                    reasons.append("\(sentinel): does not know a master named \(sentinels.masterName)")
                }
            }
        }
        return .failure(RedisError(
            kind: .unavailable,
            message: "no sentinel named the master \(sentinels.masterName): " + reasons.joined(separator: "; ")))
    }

    /// Connects to `address`, writes `bytes` and collects `replies` replies, then closes.
    static func exchange(with address: RedisURL.Address, useTLS: Bool, bytes: [UInt8], replies: Int,
                         configuration: RedisConfiguration, loop: EventLoop) async -> Result<[RESPValue], RedisError> {
        let connection: StreamConnection
        do {
            connection = try await StreamConnection.connect(
                host: address.host, port: address.port, tls: useTLS ? configuration.tls : nil,
                timeout: configuration.connectTimeout, outboundLimit: 64 << 10, on: loop)
        } catch {
            let e = error as? SwitchboardError
            return .failure(RedisError(kind: .unavailable, message: "cannot connect: \(e?.message ?? "cancelled")",
                                       underlying: e))
        }
        let timeout = configuration.sentinelTimeout
        let limits = configuration.parseLimits
        return await withCheckedContinuation { c in
            loop.execute {
                let exchange = SentinelExchange(connection: connection, expected: replies, limits: limits, continuation: c)
                exchange.start(bytes, timeout: timeout, loop: loop)
            }
        }
    }
}

/// One request and its replies on a fresh connection. Loop-confined; finishes once.
private final class SentinelExchange: @unchecked Sendable {
    // Safety: touched only on the connection's loop.
    private let connection: StreamConnection
    private let expected: Int
    private var parser: RESPParser
    private var values: [RESPValue] = []
    private var continuation: CheckedContinuation<Result<[RESPValue], RedisError>, Never>?
    private var timer: EventLoopTimer?

    init(connection: StreamConnection, expected: Int, limits: RESPParseLimits,
         continuation: CheckedContinuation<Result<[RESPValue], RedisError>, Never>) {
        self.connection = connection
        self.expected = expected
        parser = RESPParser(limits: limits)
        self.continuation = continuation
    }

    func start(_ bytes: [UInt8], timeout: Duration, loop: EventLoop) {
        // The closures keep `self` until `finish` closes the connection (which drops them).
        connection.onRead = { bytes in self.received(bytes) }
        connection.onClose = { error in
            self.finish(.failure(RedisError(kind: .unavailable,
                                            message: "the sentinel closed the connection" + (error.map { ": \($0.message)" } ?? ""),
                                            underlying: error)))
        }
        timer = loop.schedule(after: timeout) { [weak self] in
            self?.finish(.failure(RedisError(kind: .timedOut, message: "no answer within \(timeout)")))
        }
        guard connection.write(bytes) else {
            return finish(.failure(RedisError(kind: .limitExceeded, message: "cannot queue the request")))
        }
    }

    private func received(_ bytes: UnsafeRawBufferPointer) {
        parser.append(bytes)
        while continuation != nil {
            do {
                guard let value = try parser.next() else { return }
                values.append(value)
                if values.count >= expected { return finish(.success(values)) }
            } catch {
                return finish(.failure(RedisError(kind: .protocolError, message: "invalid reply: \(error)")))
            }
        }
    }

    private func finish(_ result: Result<[RESPValue], RedisError>) {
        guard let continuation else { return }
        self.continuation = nil
        timer?.cancel()
        timer = nil
        connection.close(linger: .zero)
        continuation.resume(returning: result)
    }
}

/// A pub/sub connection to one of a Sentinel URL's sentinels at a time (the next one at once
/// after a loss; the backoff only after a whole round failed), subscribed to `+switch-master`:
/// calls ``onSwitch`` with the new address of the master it watches. Loop-confined: every
/// member is touched on the link's loop.
final class RedisSentinelWatcher: RedisLinkOwner, @unchecked Sendable {
    // Safety: every member is touched only on `link.loop`'s thread.
    let link: RedisLink
    let masterName: String
    /// The master moved to this address.
    var onSwitch: ((RedisURL.Address) -> Void)?
    /// Runs from the `SUBSCRIBE` until the sentinel confirms it: a sentinel that accepted the
    /// connection and then says nothing would leave the watcher deaf; on expiry the link drops
    /// it and tries the next sentinel.
    private var confirmationTimer: EventLoopTimer?
    /// Whether this connection's subscription is confirmed.
    private(set) var isSubscribed = false

    init(loop: EventLoop, url: RedisURL, configuration: RedisConfiguration, logger: Logger, masterName: String) {
        link = RedisLink(loop: loop, url: url, configuration: configuration, logger: logger, role: .sentinel)
        self.masterName = masterName
        link.owner = self
    }

    func start() { link.start() }

    func close() {
        onSwitch = nil
        confirmationTimer?.cancel()
        confirmationTimer = nil
        link.close()
    }

    func linkUp(reconnected: Bool) {
        var bytes: [UInt8] = []
        RESPEncoder.append(command: [Array("SUBSCRIBE".utf8), Array("+switch-master".utf8)], to: &bytes)
        guard link.write(bytes) else {
            return link.fail(RedisError(kind: .limitExceeded, message: "cannot queue SUBSCRIBE +switch-master"))
        }
        let timeout = link.configuration.sentinelTimeout
        confirmationTimer?.cancel()
        confirmationTimer = link.loop.schedule(after: timeout) { [weak self] in
            guard let self, !isSubscribed else { return }
            confirmationTimer = nil
            link.fail(RedisError(kind: .timedOut, message: "the sentinel did not confirm SUBSCRIBE +switch-master within \(timeout)"))
        }
    }

    func linkReceived(_ value: RESPValue) {
        // ["message", "+switch-master", "<name> <old ip> <old port> <new ip> <new port>"]
        if case .array(let items) = value, items.count == 3, items[0].string == "subscribe",
           items[1].string == "+switch-master" {
            isSubscribed = true
            link.succeeded()
            confirmationTimer?.cancel()
            confirmationTimer = nil
            return
        }
        guard case .array(let items) = value, items.count == 3, items[0].string == "message",
              items[1].string == "+switch-master", let text = items[2].string else {
            if case .error(let message) = value {
                link.fail(RedisError(kind: .server, message: "the sentinel refused SUBSCRIBE +switch-master: \(message)"))
            }
            return
        }
        let fields = text.split(separator: " ")
        guard fields.count == 5, fields[0] == masterName, let port = Int(fields[4]), (1...65535).contains(port),
              !fields[3].isEmpty else { return }
        onSwitch?(RedisURL.Address(host: String(fields[3]), port: port))
    }

    func linkDown(_ error: RedisError) {
        isSubscribed = false
        confirmationTimer?.cancel()
        confirmationTimer = nil
    }
}
