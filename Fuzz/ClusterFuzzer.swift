// libFuzzer target: what a Redis Cluster node answers, as the cluster client reads it. The input
// is a RESP2 stream: every value is read as a `CLUSTER SLOTS` reply (a valid map must serve only
// slots in range, each by exactly one range, and name a master for each), every error or simple
// string as a redirection (its slot in range, its port valid), and every bulk string's hash slot
// is computed (always in range). None of it may crash, whatever the bytes.

private let clusterLimits = RESPParseLimits(maxBulkLength: 512, maxAggregateCount: 64, maxDepth: 5, maxLineLength: 256)
private let asked = RedisURL.Address(host: "10.0.0.1", port: 7000)

private func checkMap(_ value: RESPValue) {
    guard let map = try? RedisClusterSlotMap(clusterSlotsReply: value, from: asked) else { return }
    var served = 0
    for range in map.ranges {
        guard RedisClusterSlot.range.contains(range.slots.lowerBound),
              RedisClusterSlot.range.contains(range.slots.upperBound) else { fatalError("a range outside the slots") }
        guard (1...65535).contains(range.master.address.port) else { fatalError("a master with port \(range.master.address.port)") }
        served += range.slots.count
        if map.master(for: range.slots.lowerBound) != range.master.address { fatalError("the map disagrees with its range") }
    }
    if served != map.servedSlotCount { fatalError("overlapping ranges: \(served) vs \(map.servedSlotCount)") }
}

private func checkRedirect(_ message: String) {
    guard let redirect = RedisClusterRedirect(errorMessage: message, from: asked) else { return }
    switch redirect {
    case .moved(let slot, let to), .ask(let slot, let to):
        guard RedisClusterSlot.range.contains(slot) else { fatalError("redirect to slot \(slot)") }
        if let to, !(1...65535).contains(to.port) { fatalError("redirect to port \(to.port)") }
    case .tryAgain, .clusterDown: break
    }
}

private func checkValue(_ value: RESPValue, depth: Int) {
    switch value {
    case .error(let message), .simpleString(let message): checkRedirect(message)
    case .bulkString(let bytes):
        if !RedisClusterSlot.range.contains(RedisClusterSlot.slot(of: bytes)) { fatalError("slot out of range") }
        checkRedirect(String(decoding: bytes, as: UTF8.self))
    case .array(let values): for v in values { checkValue(v, depth: depth + 1) }
    default: break
    }
}

func clusterFuzz(_ bytes: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    var parser = RESPParser(limits: clusterLimits)
    parser.append(UnsafeRawBufferPointer(start: bytes, count: size))
    while let value = try? parser.next() {
        checkMap(value)
        checkValue(value, depth: 0)
    }
    return 0
}
