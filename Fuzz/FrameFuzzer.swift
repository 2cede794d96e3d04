// libFuzzer target: the frame parser, message assembler and close rules, both roles. Every
// chunking of the same input must give the same actions, and nothing may trap.

func frameFuzz(_ bytes: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let data = UnsafeRawBufferPointer(start: bytes, count: size)
    let limits = WebSocketProtocolLimits(maxFrameSize: 1 << 16, maxMessageSize: 1 << 17)
    for role in [WebSocketRole.server, .client] {
        var reference: [WebSocketProtocolAction]?
        forEachChunking(data) { chunks in
            var machine = WebSocketProtocol(role: role, limits: limits)
            var rng = FuzzRNG()
            expectSameAsFirstChunking(feedChunks(chunks, to: &machine, using: &rng), &reference)
            // Whatever happened, the application may still answer (open or close received), and
            // writing the close then either starts the handshake or completes it.
            var out: [UInt8] = []
            let before = machine.state
            let answered = (try? machine.writeMessage(.text, payload: [0x61], into: &out, using: &rng)) != nil
            if answered != (before == .open || before == .closeReceived) { fatalError("send refused in state \(before)") }
            let progress = try? machine.writeClose(code: .normalClosure, reason: "fuzz", into: &out, using: &rng)
            switch (before, progress) {
            case (.open, .waitingForPeer?), (.closeReceived, .complete?), (.closing, .alreadySent?), (.closed, .alreadySent?): break
            default: fatalError("writeClose in state \(before) gave \(String(describing: progress))")
            }
        }
    }
    return 0
}
