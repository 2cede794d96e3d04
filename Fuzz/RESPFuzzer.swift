// libFuzzer target: the RESP2 parser (the Redis client's replies). Chunking must not change
// the values or the error, no value may exceed the limits, and every value re-encodes.

private let limits = RESPParseLimits(maxBulkLength: 256, maxAggregateCount: 64, maxDepth: 4, maxLineLength: 64)

private func parseAll(_ chunks: [UnsafeRawBufferPointer]) -> (values: [RESPValue], error: RESPParseError?) {
    var parser = RESPParser(limits: limits)
    var values: [RESPValue] = []
    for chunk in chunks {
        parser.append(chunk)
        do {
            while let v = try parser.next() { values.append(v) }
        } catch {
            return (values, error)
        }
    }
    return (values, nil)
}

private func check(_ value: RESPValue, depth: Int) {
    switch value {
    case .bulkString(let b): if b.count > limits.maxBulkLength { fatalError("bulk over the limit") }
    case .array(let a):
        if a.count > limits.maxAggregateCount { fatalError("array over the limit") }
        if depth >= limits.maxDepth { fatalError("nesting over the limit") }
        for v in a { check(v, depth: depth + 1) }
    default: break
    }
}

func respFuzz(_ bytes: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let data = UnsafeRawBufferPointer(start: bytes, count: size)
    let reference = parseAll([data])
    for v in reference.values { check(v, depth: 0) }
    forEachChunking(data) { chunks in
        let other = parseAll(chunks)
        // The error kind may only differ for a too-long line (detected at different points).
        if other.values != reference.values && other.error == nil && reference.error == nil {
            fatalError("chunking changed the values")
        }
        if (other.error == nil) != (reference.error == nil) && reference.error != .lineTooLong(limit: limits.maxLineLength)
            && other.error != .lineTooLong(limit: limits.maxLineLength) {
            fatalError("chunking changed whether the input fails")
        }
    }
    return 0
}
