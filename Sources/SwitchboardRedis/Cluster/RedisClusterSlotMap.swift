/// Which master serves each hash slot of a Redis Cluster, as one node saw it: built from that
/// node's reply to `CLUSTER SLOTS`. Pure: no I/O.
///
/// The reply is an array of entries `[start, end, master, replica…]`, where each node is
/// `[endpoint, port, id?, …]` (more elements may follow and are ignored). The reply is checked
/// whole: an entry of the wrong shape or type, a slot outside `0...16383`, `start > end`, a
/// slot given twice, a port outside `1...65535` or an endpoint that is not a host name or IP
/// address rejects all of it with a ``RedisClusterSlotMapError`` (a half-understood map would
/// send commands to the wrong node). Nothing in the reply can crash the parser.
///
/// Endpoints, as the `CLUSTER SLOTS` documentation says: a null or empty endpoint means "the
/// node you asked" (it does not know the address clients reach it at), so it is replaced by the
/// host of the node the reply came from, with the port of the reply; `?` means a node whose
/// address is unknown (configured to announce a host name it does not have), not necessarily
/// the node you asked: a replica at `?` is left out, and the slots of a master at `?` are in
/// ``unknownMasterSlots`` (``master(for:)`` answers nil for them, as for a slot no one serves).
public struct RedisClusterSlotMap: Sendable, Equatable {
    /// A host and a TCP port.
    public typealias Address = RedisURL.Address

    /// A node named in the reply.
    public struct Node: Sendable, Hashable {
        /// Where clients reach it.
        public var address: Address
        /// Its node id (40 hex digits), when the reply gave one (Redis 4 and later).
        public var id: String?

        /// A node from its parts.
        public init(address: Address, id: String? = nil) {
            self.address = address
            self.id = id
        }
    }

    /// A range of slots and the nodes that serve it.
    public struct SlotRange: Sendable, Equatable {
        /// The slots, within `0...16383`.
        public var slots: ClosedRange<Int>
        /// The master: the node that takes writes for these slots.
        public var master: Node
        /// Its replicas, in the reply's order (only those with a known address).
        public var replicas: [Node]

        /// A range from its parts.
        public init(slots: ClosedRange<Int>, master: Node, replicas: [Node] = []) {
            self.slots = slots
            self.master = master
            self.replicas = replicas
        }
    }

    /// The ranges whose master is known, sorted by first slot, disjoint.
    public private(set) var ranges: [SlotRange]
    /// Slots whose master's address is unknown (endpoint `?`), sorted, disjoint from
    /// ``ranges``: the cluster serves them, but this reply does not say where.
    public private(set) var unknownMasterSlots: [ClosedRange<Int>]

    /// An empty map: no slot is served.
    public init() {
        ranges = []
        unknownMasterSlots = []
    }

    /// A map from ranges, checked as a reply is: slots within `0...16383` and given once.
    public init(ranges: [SlotRange], unknownMasterSlots: [ClosedRange<Int>] = []) throws(RedisClusterSlotMapError) {
        for (index, range) in ranges.enumerated() where !RedisClusterSlot.range.contains(range.slots) {
            throw RedisClusterSlotMapError("range \(index + 1): slots \(range.slots) are not within 0...16383")
        }
        for slots in unknownMasterSlots where !RedisClusterSlot.range.contains(slots) {
            throw RedisClusterSlotMapError("slots \(slots) are not within 0...16383")
        }
        self.ranges = ranges.sorted { $0.slots.lowerBound < $1.slots.lowerBound }
        self.unknownMasterSlots = unknownMasterSlots.sorted { $0.lowerBound < $1.lowerBound }
        try checkDisjoint()
    }

    /// The map in `reply`, the reply to `CLUSTER SLOTS` from the node at `node` (whose host
    /// replaces a null or empty endpoint). Throws if the reply is an error reply, or is not a
    /// well-formed slot map (see the type's description); an empty array is an empty map (a
    /// cluster with no slots assigned yet).
    public init(clusterSlotsReply reply: RESPValue, from node: Address) throws(RedisClusterSlotMapError) {
        let entries: [RESPValue]
        switch reply {
        case .array(let array):
            entries = array
        case .error(let message):
            throw RedisClusterSlotMapError("the node answered with an error: \(Self.quoted(Array(message.utf8)))")
        default:
            throw RedisClusterSlotMapError("expected an array, got \(Self.kind(of: reply))")
        }
        var ranges: [SlotRange] = []
        var unknown: [ClosedRange<Int>] = []
        for (index, entry) in entries.enumerated() {
            let what = "entry \(index + 1)"
            guard case .array(let fields) = entry else {
                throw RedisClusterSlotMapError("\(what): expected an array, got \(Self.kind(of: entry))")
            }
            guard fields.count >= 3 else {
                throw RedisClusterSlotMapError("\(what): expected start slot, end slot and master, got \(fields.count) elements")
            }
            let start = try Self.slot(fields[0], what: "\(what): start slot")
            let end = try Self.slot(fields[1], what: "\(what): end slot")
            guard start <= end else {
                throw RedisClusterSlotMapError("\(what): start slot \(start) is after end slot \(end)")
            }
            let master = try Self.node(fields[2], asked: node, what: "\(what): master")
            var replicas: [Node] = []
            for (offset, field) in fields.dropFirst(3).enumerated() {
                if let replica = try Self.node(field, asked: node, what: "\(what): replica \(offset + 1)") {
                    replicas.append(replica)
                }
            }
            if let master {
                ranges.append(SlotRange(slots: start...end, master: master, replicas: replicas))
            } else {
                unknown.append(start...end)
            }
        }
        self.ranges = ranges.sorted { $0.slots.lowerBound < $1.slots.lowerBound }
        unknownMasterSlots = unknown.sorted { $0.lowerBound < $1.lowerBound }
        try checkDisjoint()
    }

    /// The address of the master serving `slot`; nil when no master is known for it (or `slot`
    /// is outside `0...16383`).
    public func master(for slot: Int) -> Address? {
        range(for: slot)?.master.address
    }

    /// The range holding `slot`, with its master and replicas; nil when no master is known.
    public func range(for slot: Int) -> SlotRange? {
        var low = 0
        var high = ranges.count
        while low < high {
            let middle = low + (high - low) / 2
            let slots = ranges[middle].slots
            if slot < slots.lowerBound {
                high = middle
            } else if slot > slots.upperBound {
                low = middle + 1
            } else {
                return ranges[middle]
            }
        }
        return nil
    }

    /// The masters' addresses, each once, in the order of their first slot.
    public var masters: [Address] {
        var seen = Set<Address>()
        return ranges.compactMap { seen.insert($0.master.address).inserted ? $0.master.address : nil }
    }

    /// How many slots have a known master.
    public var servedSlotCount: Int {
        ranges.reduce(0) { $0 + $1.slots.count }
    }

    /// Whether every slot `0...16383` has a known master.
    public var servesAllSlots: Bool { servedSlotCount == RedisClusterSlot.count }

    /// Throws if two ranges (with or without a known master) share a slot. Both lists are sorted.
    private func checkDisjoint() throws(RedisClusterSlotMapError) {
        let all = (ranges.map(\.slots) + unknownMasterSlots).sorted { $0.lowerBound < $1.lowerBound }
        for (previous, next) in zip(all, all.dropFirst()) where next.lowerBound <= previous.upperBound {
            throw RedisClusterSlotMapError("slots \(previous) and \(next) overlap: slot \(next.lowerBound) is assigned twice")
        }
    }

    /// A slot number: an integer within `0...16383`.
    private static func slot(_ value: RESPValue, what: String) throws(RedisClusterSlotMapError) -> Int {
        guard case .integer(let number) = value else {
            throw RedisClusterSlotMapError("\(what): expected an integer, got \(kind(of: value))")
        }
        guard number >= 0, number < RedisClusterSlot.count else {
            throw RedisClusterSlotMapError("\(what) \(number) is not within 0...16383")
        }
        return Int(number)  // within 0...16383: cannot trap
    }

    /// A node `[endpoint, port, id?, …]`; nil for endpoint `?` (unknown).
    private static func node(_ value: RESPValue, asked: Address, what: String) throws(RedisClusterSlotMapError) -> Node? {
        guard case .array(let fields) = value else {
            throw RedisClusterSlotMapError("\(what): expected an array, got \(kind(of: value))")
        }
        guard fields.count >= 2 else {
            throw RedisClusterSlotMapError("\(what): expected endpoint and port, got \(fields.count) elements")
        }
        let endpoint: [UInt8]
        switch fields[0] {
        case .null: endpoint = []
        case .bulkString(let bytes): endpoint = bytes
        case .simpleString(let text): endpoint = Array(text.utf8)
        default: throw RedisClusterSlotMapError("\(what): expected an endpoint (a string), got \(kind(of: fields[0]))")
        }
        guard case .integer(let portNumber) = fields[1] else {
            throw RedisClusterSlotMapError("\(what): expected a port (an integer), got \(kind(of: fields[1]))")
        }
        guard (1...65535).contains(portNumber) else {
            throw RedisClusterSlotMapError("\(what): port \(portNumber) is not within 1...65535")
        }
        let port = Int(portNumber)  // within 1...65535: cannot trap
        var id: String?
        if fields.count >= 3 {
            switch fields[2] {
            case .null: id = nil
            case .bulkString(let bytes) where isNodeID(bytes): id = String(decoding: bytes, as: UTF8.self)
            case .simpleString(let text) where isNodeID(Array(text.utf8)): id = text
            default: throw RedisClusterSlotMapError("\(what): invalid node id \(describe(fields[2]))")
            }
        }
        let host: String
        switch RedisClusterEndpoint.host(endpoint) {
        case .sameAsAsked: host = asked.host
        case .unknown: return nil
        case .host(let name): host = name
        case .invalid: throw RedisClusterSlotMapError("\(what): invalid endpoint \(quoted(endpoint))")
        }
        return Node(address: Address(host: host, port: port), id: id)
    }

    /// 1 to 64 letters and digits (Redis's are 40 hex digits).
    private static func isNodeID(_ bytes: [UInt8]) -> Bool {
        (1...64).contains(bytes.count) && bytes.allSatisfy {
            ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) || ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z"))
                || ($0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z"))
        }
    }

    private static func kind(of value: RESPValue) -> String {
        switch value {
        case .simpleString: "a simple string"
        case .error: "an error"
        case .integer: "an integer"
        case .bulkString: "a bulk string"
        case .null: "null"
        case .array(let elements): "an array of \(elements.count)"
        }
    }

    /// A value for an error message: a string quoted (shortened), else its kind.
    private static func describe(_ value: RESPValue) -> String {
        switch value {
        case .bulkString(let bytes): quoted(bytes)
        case .simpleString(let text): quoted(Array(text.utf8))
        default: kind(of: value)
        }
    }

    /// `"text"`, at most 64 bytes shown, anything but printable ASCII as `\xNN`.
    static func quoted(_ bytes: [UInt8]) -> String {
        var text = "\""
        for byte in bytes.prefix(64) {
            if byte >= 0x20, byte < 0x7F, byte != UInt8(ascii: "\""), byte != UInt8(ascii: "\\") {
                text.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                let hex = String(byte, radix: 16, uppercase: true)
                text += "\\x" + (hex.count < 2 ? "0" : "") + hex
            }
        }
        text += "\""
        return bytes.count > 64 ? text + "… (\(bytes.count) bytes)" : text
    }
}

/// A `CLUSTER SLOTS` reply that cannot be used as a slot map. The message says which entry is
/// wrong and how; it quotes at most 64 bytes of any string of the reply.
public struct RedisClusterSlotMapError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong.
    public let message: String

    init(_ message: String) {
        self.message = message
    }

    /// `invalid CLUSTER SLOTS reply: <message>`.
    public var description: String { "invalid CLUSTER SLOTS reply: \(message)" }
}
