import SwitchboardCore

/// Sending, as `WebSocketConnection.enqueue` does: `writeMessage` appends the frame to the
/// channel's send buffer, which is emptied after each flush the way `SocketChannel.emptyQueue`
/// does it (storage kept up to 64 KiB, released above).
enum SerializeBenchmarks {
    static func all() -> [Benchmark] {
        [
            small(.text, role: .server),
            small(.binary, role: .server),
            small(.text, role: .client),
            large(role: .server),
            large(role: .client),
            maskingKey(),
        ]
    }

    /// The per-frame key a client draws (`WebSocketMaskingKey(using:)` over the same
    /// `getrandom`-backed generator as the connection): the fixed cost in every client send.
    static func maskingKey() -> Benchmark {
        let batch = 64
        return Benchmark(
            name: "masking key: WebSocketMaskingKey(using:) from SystemRandomNumberGenerator",
            metric: .operations, bytesPerIteration: batch * 4, opsPerIteration: batch, opUnit: "key"
        ) { iterations in
            var rng = SystemRandom()
            for _ in 0..<iterations {
                var mixed: UInt8 = 0
                for _ in 0..<batch { mixed ^= WebSocketMaskingKey(using: &rng).b0 }
                blackHole(mixed)
            }
        }
    }

    /// `SocketChannel.emptyQueue`.
    @inline(__always)
    static func emptyQueue(_ buffer: inout [UInt8]) {
        if buffer.capacity > 64 << 10 { buffer = [] } else { buffer.removeAll(keepingCapacity: true) }
    }

    static func describe(_ role: WebSocketRole) -> String {
        role == .server ? "server, unmasked" : "client, masked"
    }

    /// 16-byte messages; the send buffer is flushed every `burst` messages.
    static func small(_ opcode: WebSocketOpcode, role: WebSocketRole) -> Benchmark {
        let payload = UnsafeRawBufferPointer(Fixtures.rawCopy(Array("Hello, WebSocket".utf8)))
        let burst = 64
        return Benchmark(
            name: "serialize: 16 B \(opcode) message (\(describe(role)))",
            metric: .operations, bytesPerIteration: burst * payload.count, opsPerIteration: burst, opUnit: "msg"
        ) { iterations in
            var proto = WebSocketProtocol(role: role)
            var rng = SystemRandom()
            var sendBuffer: [UInt8] = []
            for _ in 0..<iterations {
                for _ in 0..<burst {
                    do {
                        try proto.writeMessage(opcode, payload: payload, into: &sendBuffer, using: &rng)
                    } catch {
                        fatalError("writeMessage: \(error)")
                    }
                }
                blackHole(sendBuffer.count)
                emptyQueue(&sendBuffer)
            }
        }
    }

    /// One 1 MiB binary message per flush.
    static func large(role: WebSocketRole) -> Benchmark {
        let payload = UnsafeRawBufferPointer(Fixtures.rawCopy(Fixtures.randomBytes(Fixtures.mebi, seed: 3)))
        return Benchmark(
            name: "serialize: 1 MiB binary message (\(describe(role)))",
            metric: .bytes, bytesPerIteration: payload.count, opsPerIteration: 1, opUnit: "msg"
        ) { iterations in
            var proto = WebSocketProtocol(role: role)
            var rng = SystemRandom()
            var sendBuffer: [UInt8] = []
            for _ in 0..<iterations {
                do {
                    try proto.writeMessage(.binary, payload: payload, into: &sendBuffer, using: &rng)
                } catch {
                    fatalError("writeMessage: \(error)")
                }
                blackHole(sendBuffer.count)
                emptyQueue(&sendBuffer)
            }
        }
    }
}
