import SwitchboardCore

/// `WebSocketMasking.apply` in place, as the parser unmasks and a client masks.
enum MaskingBenchmarks {
    static func all() -> [Benchmark] {
        [large(), small()]
    }

    static let key = WebSocketMaskingKey(0x37, 0xFA, 0x21, 0x3D)

    static func large() -> Benchmark {
        let buffer = Fixtures.rawCopy(Fixtures.randomBytes(Fixtures.mebi, seed: 4))
        return Benchmark(
            name: "masking: 1 MiB in place",
            metric: .bytes, bytesPerIteration: buffer.count, opsPerIteration: 1, opUnit: "call"
        ) { iterations in
            for _ in 0..<iterations {
                WebSocketMasking.apply(key, to: opaque(buffer), phase: 0)
            }
        }
    }

    /// 16 bytes per call; the phase varies per call as it does across reads.
    static func small() -> Benchmark {
        let buffer = Fixtures.rawCopy(Fixtures.randomBytes(16, seed: 5))
        let batch = 1024
        return Benchmark(
            name: "masking: 16 B in place",
            metric: .operations, bytesPerIteration: batch * buffer.count, opsPerIteration: batch, opUnit: "call"
        ) { iterations in
            for _ in 0..<iterations {
                let target = opaque(buffer)
                for phase in 0..<batch {
                    WebSocketMasking.apply(key, to: target, phase: phase)
                }
                blackHole(target[0])
            }
        }
    }
}
