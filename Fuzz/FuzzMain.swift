// The one libFuzzer entry point of the fuzzing binary: `scripts/fuzz` builds every target into
// one binary (the core is compiled once) and picks the target with $FUZZ_TARGET.

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The target named by $FUZZ_TARGET (Frame, HTTP, LineBuffer, Inflate, RESP, Cluster), looked up once.
private let selectedTarget: (UnsafePointer<UInt8>, Int) -> Int32 = {
    let name = getenv("FUZZ_TARGET").map { String(cString: $0) } ?? ""
    switch name {
    case "Frame": return frameFuzz
    case "HTTP": return httpFuzz
    case "LineBuffer": return lineFuzz
    case "Inflate": return inflateFuzz
    case "RESP": return respFuzz
    case "Cluster": return clusterFuzz
    default:
        fputs("FUZZ_TARGET must be one of Frame, HTTP, LineBuffer, Inflate, RESP, Cluster (got \"\(name)\")\n", stderr)
        exit(2)
    }
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ bytes: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    selectedTarget(bytes, size)
}
