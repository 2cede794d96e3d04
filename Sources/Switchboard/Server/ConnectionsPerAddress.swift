/// How many sockets each peer address has open, for
/// ``WebSocketServerConfiguration/maxConnectionsPerAddress``: counted from accept to close, like
/// ``WebSocketServerConfiguration/maxConnections``. An address's entry is removed when its
/// count reaches 0, so the table only holds addresses with a socket open: no peer can grow it
/// beyond the sockets the server holds. One dictionary access per admission and per release.
///
/// Not synchronized: the server keeps it under its state lock.
struct ConnectionsPerAddress {
    private var counts: [PeerAddressKey: Int] = [:]

    /// Addresses with a socket open.
    var addresses: Int { counts.count }

    /// Sockets open from `address`.
    func count(of address: PeerAddressKey) -> Int { counts[address] ?? 0 }

    /// Counts a socket from `address` unless it has `limit` (at least 1) open already; returns
    /// whether it was counted.
    mutating func admit(_ address: PeerAddressKey, limit: Int) -> Bool {
        guard limit > 0 else { return false }
        // One lookup: an absent address is inserted at 0 and goes to 1 at once.
        return Self.increment(&counts[address, default: 0], below: limit)
    }

    private static func increment(_ count: inout Int, below limit: Int) -> Bool {
        guard count < limit else { return false }
        count += 1
        return true
    }

    /// A socket from `address` has closed.
    mutating func release(_ address: PeerAddressKey) {
        guard let index = counts.index(forKey: address) else { return }
        if counts.values[index] > 1 {
            counts.values[index] -= 1
        } else {
            counts.remove(at: index)
        }
    }
}
