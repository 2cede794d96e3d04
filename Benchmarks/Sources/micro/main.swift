// In-process micro benchmarks of SwitchboardCore's hot paths: frame parsing and
// serialization (as WebSocketConnection drives them), masking, UTF-8 validation and line
// splitting. Prints one Markdown table row per benchmark.
//
//   micro [--quick] [--filter TEXT]...
//
// Each benchmark warms up, then takes timed samples of a fixed batch sized to ~150 ms
// (--quick: 5 samples of ~30 ms). Whole run: ~20 s, --quick ~3 s. Throughput is the median over samples, with min–max;
// allocations per operation are counted by CMallocCounter over all samples.

#if canImport(Glibc)
import Glibc
#endif

var config = HarnessConfiguration.full
var filters: [String] = []
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--quick":
        config = .quick
    case "--filter":
        guard let text = arguments.popFirst() else {
            print("error: --filter needs a value")
            exit(2)
        }
        filters.append(text.lowercased())
    case "-h", "--help":
        print("usage: micro [--quick] [--filter TEXT]...  (a benchmark runs if its name contains any TEXT)")
        exit(0)
    default:
        print("error: unknown argument \(argument) (see --help)")
        exit(2)
    }
}

guard let allocationSummary = AllocationCheck.run() else { exit(1) }

let benchmarks: [() -> [Benchmark]] = [
    ParseBenchmarks.all,
    SerializeBenchmarks.all,
    MaskingBenchmarks.all,
    UTF8Benchmarks.all,
    LineBenchmarks.all,
]

let started = Harness.clock.now
print("SwitchboardCore micro benchmarks (\(config.label)): \(config.samples) samples of ~\(Int(config.sampleSeconds * 1000)) ms each after warm-up.")
print("GB/s and MB/s are 10^9 and 10^6 bytes per second of payload (wire bytes for small-frame parsing); Mops/s is millions of operations per second.")
print("Malloc counter check: \(allocationSummary).")
print("")
print(Format.header)
for make in benchmarks {
    for benchmark in make() {
        let name = benchmark.name.lowercased()
        if !filters.isEmpty && !filters.contains(where: { name.contains($0) }) { continue }
        let measurement = Harness.measure(benchmark, config)
        print(Format.row(measurement))
    }
}
print("")
print("Total time: \(Format.duration((Harness.clock.now - started).seconds)).")
