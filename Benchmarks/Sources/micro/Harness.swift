import CMallocCounter

/// One benchmark: `run(n)` performs `n` iterations; an iteration is `opsPerIteration`
/// operations over `bytesPerIteration` bytes.
///
/// Mutable state (the protocol machine, send buffer, line buffer) is created as locals at the
/// start of each `run` call rather than captured: a captured `var` lives in a heap box whose
/// every access pays a dynamic exclusivity check (`swift_beginAccess`), a cost of the harness,
/// not of SwitchboardCore. Setup happens once per sample, so it does not show in the numbers.
struct Benchmark {
    enum Metric {
        /// Report bytes per second (GB/s or MB/s) first.
        case bytes
        /// Report operations per second (Mops/s) first.
        case operations
    }

    let name: String
    let metric: Metric
    let bytesPerIteration: Int
    let opsPerIteration: Int
    /// What one operation is, for the time and allocation columns ("frame", "msg", "line").
    let opUnit: String
    let run: (Int) -> Void
}

struct HarnessConfiguration {
    var label: String
    var samples: Int
    /// Target duration of one sample, in seconds.
    var sampleSeconds: Double
    /// Minimum warm-up duration, in seconds.
    var warmupSeconds: Double

    /// About 20 s for the whole binary.
    static let full = HarnessConfiguration(label: "full", samples: 9, sampleSeconds: 0.15, warmupSeconds: 0.15)
    /// About 3 s for the whole binary.
    static let quick = HarnessConfiguration(label: "--quick", samples: 5, sampleSeconds: 0.03, warmupSeconds: 0.03)
}

struct Sample {
    let seconds: Double
    let iterations: Int
    let allocations: UInt64
}

struct Measurement {
    let benchmark: Benchmark
    let samples: [Sample]

    func bytesPerSecond(_ s: Sample) -> Double { Double(benchmark.bytesPerIteration * s.iterations) / s.seconds }
    func opsPerSecond(_ s: Sample) -> Double { Double(benchmark.opsPerIteration * s.iterations) / s.seconds }

    var allocationsPerOp: Double {
        let allocations = samples.reduce(0) { $0 + $1.allocations }
        let ops = samples.reduce(0) { $0 + $1.iterations * benchmark.opsPerIteration }
        return Double(allocations) / Double(ops)
    }
}

extension Duration {
    var seconds: Double {
        let (s, atto) = components
        return Double(s) + Double(atto) * 1e-18
    }
}

enum Harness {
    static let clock = ContinuousClock()

    static func time(_ body: () -> Void) -> Double {
        let start = clock.now
        body()
        return (clock.now - start).seconds
    }

    static func measure(_ benchmark: Benchmark, _ config: HarnessConfiguration) -> Measurement {
        // Warm-up doubles as calibration: grow the batch until one run takes a measurable
        // time, and keep running until the warm-up budget is spent.
        let floor = min(0.01, config.sampleSeconds / 3)
        var n = 1
        var warmed = 0.0
        var perIteration = 0.0
        while true {
            let t = time { benchmark.run(n) }
            warmed += t
            if t >= floor {
                perIteration = t / Double(n)
                if warmed >= config.warmupSeconds { break }
            } else {
                let scale = t > 0 ? floor / t * 1.2 : 100
                n = max(n * 2, min(n * 100, Int((Double(n) * scale).rounded(.up))))
            }
        }
        let iterations = max(1, Int((config.sampleSeconds / perIteration).rounded()))
        var samples: [Sample] = []
        for _ in 0..<config.samples {
            let allocationsBefore = switchboard_malloc_count()
            let start = clock.now
            benchmark.run(iterations)
            let elapsed = (clock.now - start).seconds
            let allocationsAfter = switchboard_malloc_count()
            samples.append(Sample(seconds: elapsed, iterations: iterations, allocations: allocationsAfter &- allocationsBefore))
        }
        return Measurement(benchmark: benchmark, samples: samples)
    }
}

// MARK: - Formatting

enum Format {
    static let header = """
        | Benchmark | Median | Min – max | Other rate (median) | Time/op (median) | Allocs/op |
        | --- | ---: | ---: | ---: | ---: | ---: |
        """

    static func row(_ m: Measurement) -> String {
        let b = m.benchmark
        let bytes = m.samples.map(m.bytesPerSecond).sorted()
        let ops = m.samples.map(m.opsPerSecond).sorted()
        let medianOps = median(ops)
        let primary: String
        let range: String
        let other: String
        switch b.metric {
        case .bytes:
            let unit = byteUnit(median(bytes))
            primary = "\(fixed(median(bytes) / unit.scale)) \(unit.name)"
            range = "\(fixed(bytes.first! / unit.scale)) – \(fixed(bytes.last! / unit.scale)) \(unit.name)"
            other = opsRate(medianOps, b.opUnit)
        case .operations:
            primary = "\(fixed(medianOps / 1e6)) Mops/s"
            range = "\(fixed(ops.first! / 1e6)) – \(fixed(ops.last! / 1e6)) Mops/s"
            let unit = byteUnit(median(bytes))
            other = "\(fixed(median(bytes) / unit.scale)) \(unit.name)"
        }
        let timePerOp = duration(1 / medianOps) + "/" + b.opUnit
        let allocations = String(format2: m.allocationsPerOp)
        return "| \(b.name) | \(primary) | \(range) | \(other) | \(timePerOp) | \(allocations) |"
    }

    static func median(_ sorted: [Double]) -> Double {
        let c = sorted.count
        return c % 2 == 1 ? sorted[c / 2] : (sorted[c / 2 - 1] + sorted[c / 2]) / 2
    }

    static func byteUnit(_ bytesPerSecond: Double) -> (name: String, scale: Double) {
        bytesPerSecond >= 1e9 ? ("GB/s", 1e9) : ("MB/s", 1e6)
    }

    static func opsRate(_ perSecond: Double, _ unit: String) -> String {
        if perSecond >= 1e6 { return "\(fixed(perSecond / 1e6)) M \(unit)s/s" }
        if perSecond >= 1e3 { return "\(fixed(perSecond / 1e3)) k \(unit)s/s" }
        return "\(fixed(perSecond)) \(unit)s/s"
    }

    static func duration(_ seconds: Double) -> String {
        if seconds < 1e-6 { return "\(fixed(seconds * 1e9)) ns" }
        if seconds < 1e-3 { return "\(fixed(seconds * 1e6)) µs" }
        if seconds < 1 { return "\(fixed(seconds * 1e3)) ms" }
        return "\(fixed(seconds)) s"
    }

    /// Three significant digits, at most two decimals (12.3, 1.23, 123, 1234).
    static func fixed(_ value: Double) -> String {
        let magnitude = abs(value)
        let decimals = magnitude >= 100 ? 0 : magnitude >= 10 ? 1 : 2
        return String(value, decimals: decimals)
    }
}

extension String {
    /// `value` rounded to `decimals` places, without Foundation.
    init(_ value: Double, decimals: Int) {
        var scale = 1.0
        for _ in 0..<decimals { scale *= 10 }
        let scaled = (abs(value) * scale).rounded()
        let integer = Int(scaled / scale)
        let fraction = Int(scaled - Double(integer) * scale)
        var text = (value < 0 && scaled != 0 ? "-" : "") + String(integer)
        if decimals > 0 {
            let digits = String(fraction)
            text += "." + String(repeating: "0", count: decimals - digits.count) + digits
        }
        self = text
    }

    init(format2 value: Double) { self.init(value, decimals: 2) }
}
