// libFuzzer target: the frame parser, message assembler and close rules, both roles. Every
// chunking of the same input must give the same actions, and nothing may trap.

@_cdecl("LLVMFuzzerTestOneInput")
public func frameFuzz(_ bytes: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let data = UnsafeRawBufferPointer(start: bytes, count: size)
    let limits = WebSocketProtocolLimits(maxFrameSize: 1 << 16, maxMessageSize: 1 << 17)
    for role in [WebSocketRole.server, .client] {
        var reference: [WebSocketProtocolAction]?
        forEachChunking(data) { chunks in
            var machine = WebSocketProtocol(role: role, limits: limits)
            var rng = FuzzRNG()
            var actions: [WebSocketProtocolAction] = []
            for chunk in chunks {
                var offset = 0
                while let action = machine.nextAction(in: chunk, offset: &offset, using: &rng) {
                    actions.append(action)
                }
                if offset != chunk.count { fatalError("parser left bytes unconsumed") }
            }
            if let reference {
                if reference != actions { fatalError("chunking changed the result") }
            } else {
                reference = actions
            }
            var out: [UInt8] = []
            _ = try? machine.writeClose(code: .normalClosure, reason: "fuzz", into: &out, using: &rng)
        }
    }
    return 0
}
