// Shared by the libFuzzer targets: feed one input in several chunkings derived from the input
// itself, so a target exercises every "frame split across reads" path.

/// Calls `body` with consecutive chunks of `data`; chunk sizes cycle through a pattern taken
/// from the first bytes of the input (1…16 bytes), then the whole input at once is tried by
/// the caller separately.
func forEachChunking(_ data: UnsafeRawBufferPointer, _ body: (_ chunks: [UnsafeRawBufferPointer]) -> Void) {
    body([data])
    guard data.count > 1 else { return }
    let patternLength = min(4, data.count)
    var pattern: [Int] = []
    for i in 0..<patternLength { pattern.append(Int(data[i] & 0x0F) + 1) }
    for variant in 0..<3 {
        var chunks: [UnsafeRawBufferPointer] = []
        var offset = 0
        var i = variant
        while offset < data.count {
            let size: Int
            switch variant {
            case 0: size = 1
            case 1: size = pattern[i % pattern.count]
            default: size = pattern[i % pattern.count] * 37
            }
            let end = min(data.count, offset + size)
            chunks.append(UnsafeRawBufferPointer(rebasing: data[offset..<end]))
            offset = end
            i += 1
        }
        body(chunks)
    }
}

/// Feeds `chunks` to `machine` in order and returns every action; traps if the parser leaves
/// bytes of a chunk unconsumed.
func feedChunks(_ chunks: [UnsafeRawBufferPointer], to machine: inout WebSocketProtocol,
                using rng: inout FuzzRNG) -> [WebSocketProtocolAction] {
    var actions: [WebSocketProtocolAction] = []
    for chunk in chunks {
        var offset = 0
        while let action = machine.nextAction(in: chunk, offset: &offset, using: &rng) {
            actions.append(action)
        }
        if offset != chunk.count { fatalError("parser left bytes unconsumed") }
    }
    return actions
}

/// Traps unless `actions` equal those of the first chunking (`reference`, set on first use).
func expectSameAsFirstChunking(_ actions: [WebSocketProtocolAction], _ reference: inout [WebSocketProtocolAction]?) {
    if let reference {
        if reference != actions { fatalError("chunking changed the result") }
    } else {
        reference = actions
    }
}

/// A deterministic generator: fuzzing must be reproducible.
struct FuzzRNG: RandomNumberGenerator {
    var state: UInt64 = 0x9E37_79B9_7F4A_7C15
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
