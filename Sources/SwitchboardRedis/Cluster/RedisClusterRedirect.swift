/// What a Redis Cluster node's error reply asks the client to do, when it is one of the
/// cluster's redirections or retry requests. Pure: no I/O.
///
/// Parsed strictly from the error message (`-MOVED 3999 127.0.0.1:6381` arrives as
/// `RESPValue.error("MOVED 3999 127.0.0.1:6381")`): anything that does not have exactly the
/// documented form is not a redirect (the initializers return nil), and the client treats it as
/// a plain error reply. Redis Cluster specification, "Redirection and resharding".
public enum RedisClusterRedirect: Sendable, Hashable {
    /// `MOVED <slot> <endpoint>`: `slot` is served by another node now. Send the command there,
    /// and refresh the slot map (more slots have probably moved). The address is nil when the
    /// node named the endpoint `?` (a node whose address it does not know): refresh the map.
    case moved(slot: Int, to: RedisURL.Address?)
    /// `ASK <slot> <endpoint>`: `slot` is being migrated and this key is already on the other
    /// node. Send this one command there, preceded by `ASKING`; the slot map is unchanged. The
    /// address is nil when the node named the endpoint `?`.
    case ask(slot: Int, to: RedisURL.Address?)
    /// `TRYAGAIN …`: a multi-key command during a slot's migration, whose keys are split between
    /// the two nodes for now; send it again after a short wait.
    case tryAgain
    /// `CLUSTERDOWN …`: the cluster (or the shard of this slot) cannot serve now, e.g. during a
    /// failover; send it again after a wait.
    case clusterDown

    /// The redirect in `reply`, an error reply from the node at `node`; nil for any other value.
    public init?(_ reply: RESPValue, from node: RedisURL.Address) {
        guard case .error(let message) = reply else { return nil }
        self.init(errorMessage: message, from: node)
    }

    /// The redirect in an error reply's message (without the leading `-`) from the node at
    /// `node`, whose host replaces an empty one in `MOVED`/`ASK` (`MOVED 3999 :6381`: the node
    /// does not know the address clients reach it at). Nil when `message` is not a redirect or
    /// is malformed: a slot outside `0...16383` or not plain digits, a port outside `1...65535`,
    /// a host that is not a host name or IP address, missing or extra fields. An IPv6 host has
    /// colons itself: the port is after the last one (`MOVED 1 ::1:7000`), brackets are
    /// accepted (`MOVED 1 [::1]:7000`).
    public init?(errorMessage message: String, from node: RedisURL.Address) {
        let bytes = Array(message.utf8)
        let space = UInt8(ascii: " ")
        let firstWord = bytes.prefix { $0 != space }
        let word = String(decoding: firstWord, as: UTF8.self)
        switch word {
        case "TRYAGAIN":
            self = .tryAgain
            return
        case "CLUSTERDOWN":
            self = .clusterDown
            return
        case "MOVED", "ASK":
            break
        default:
            return nil
        }
        let fields = bytes.split(separator: space, maxSplits: 3, omittingEmptySubsequences: false)
        guard fields.count == 3, let slot = Self.slot(fields[1]),
              let colon = fields[2].lastIndex(of: UInt8(ascii: ":")),
              let port = Self.port(fields[2][fields[2].index(after: colon)...]) else {
            return nil
        }
        let address: RedisURL.Address?
        switch RedisClusterEndpoint.host(Array(fields[2][..<colon])) {
        case .sameAsAsked: address = RedisURL.Address(host: node.host, port: port)
        case .unknown: address = nil
        case .host(let host): address = RedisURL.Address(host: host, port: port)
        case .invalid: return nil
        }
        self = word == "MOVED" ? .moved(slot: slot, to: address) : .ask(slot: slot, to: address)
    }

    /// 1–5 ASCII digits, within `0...16383`.
    private static func slot(_ text: ArraySlice<UInt8>) -> Int? {
        guard let value = decimal(text, maximumDigits: 5), RedisClusterSlot.range.contains(value) else { return nil }
        return value
    }

    /// 1–5 ASCII digits, within `1...65535`.
    private static func port(_ text: ArraySlice<UInt8>) -> Int? {
        guard let value = decimal(text, maximumDigits: 5), (1...65535).contains(value) else { return nil }
        return value
    }

    /// The value of 1 to `maximumDigits` (≤ 9: cannot overflow) ASCII digits.
    private static func decimal(_ text: ArraySlice<UInt8>, maximumDigits: Int) -> Int? {
        guard (1...maximumDigits).contains(text.count) else { return nil }
        var value = 0
        for byte in text {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return value
    }
}
