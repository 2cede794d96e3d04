import SwitchboardCore

/// Receiving, as `WebSocketConnection.handleRead` does: a server-role `WebSocketProtocol`
/// fed each read, pulling actions with `nextAction(in:offset:using:)` until it returns nil.
enum ParseBenchmarks {
    static func all() -> [Benchmark] {
        [smallFrames(), largeFrame()]
    }

    /// Drains every action from one read; returns the number of messages delivered.
    @inline(__always)
    static func drain(_ proto: inout WebSocketProtocol, _ input: UnsafeRawBufferPointer, _ rng: inout SystemRandom) -> Int {
        var offset = 0
        var messages = 0
        while let action = proto.nextAction(in: input, offset: &offset, using: &rng) {
            switch action {
            case .message(.text(let payload)), .message(.binary(let payload)):
                // The connection reads the payload size and queues the message.
                blackHole(payload.count)
                messages += 1
            default:
                fatalError("unexpected action \(action)")
            }
        }
        return messages
    }

    /// Many masked 16-byte text frames in one 64 KiB read.
    static func smallFrames() -> Benchmark {
        let payload = Array("Hello, WebSocket".utf8)
        precondition(payload.count == 16)
        let (bytes, frames) = Fixtures.maskedFrames(opcode: .text, payload: payload, limit: 64 * Fixtures.kibi, seed: 1)
        let input = UnsafeRawBufferPointer(Fixtures.rawCopy(bytes))
        return Benchmark(
            name: "parse: 16 B masked text frames, one 64 KiB read (\(frames) frames)",
            metric: .operations, bytesPerIteration: bytes.count, opsPerIteration: frames, opUnit: "frame"
        ) { iterations in
            var proto = WebSocketProtocol(role: .server)
            var rng = SystemRandom()
            for _ in 0..<iterations {
                let messages = drain(&proto, input, &rng)
                precondition(messages == frames)
            }
        }
    }

    /// One masked 1 MiB binary frame, arriving in reads of the event loop's 256 KiB buffer.
    static func largeFrame() -> Benchmark {
        let payload = Fixtures.randomBytes(Fixtures.mebi, seed: 2)
        var bytes: [UInt8] = []
        WebSocketFrameSerializer.writeFrame(opcode: .binary, payload: payload, maskingKey: WebSocketMaskingKey(0x37, 0xFA, 0x21, 0x3D), into: &bytes)
        let input = UnsafeRawBufferPointer(Fixtures.rawCopy(bytes))
        let readSize = 256 * Fixtures.kibi
        return Benchmark(
            name: "parse: 1 MiB masked binary frame, 256 KiB reads",
            metric: .bytes, bytesPerIteration: payload.count, opsPerIteration: 1, opUnit: "msg"
        ) { iterations in
            var proto = WebSocketProtocol(role: .server)
            var rng = SystemRandom()
            for _ in 0..<iterations {
                var messages = 0
                var start = 0
                while start < input.count {
                    let end = min(start + readSize, input.count)
                    messages += drain(&proto, UnsafeRawBufferPointer(rebasing: input[start..<end]), &rng)
                    start = end
                }
                precondition(messages == 1)
            }
        }
    }
}
