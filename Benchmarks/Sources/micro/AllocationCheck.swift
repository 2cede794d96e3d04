import CMallocCounter
#if canImport(Glibc)
import Glibc
#endif

/// Verifies that the malloc counter sees the allocations the benchmarks make: a Swift class
/// instance and an array (swift_allocObject → malloc inside libswiftCore), an over-aligned raw
/// allocation (aligned_alloc / posix_memalign), and libc's calloc and realloc.
enum AllocationCheck {
    final class Probe {
        var value = 0
    }

    @inline(never)
    static func makeProbe() -> Probe { Probe() }

    @inline(never)
    static func makeArray() -> [UInt8] { [UInt8](repeating: 1, count: 100) }

    /// Allocations made by `body`.
    static func count(_ body: () -> Void) -> UInt64 {
        let before = switchboard_malloc_count()
        body()
        return switchboard_malloc_count() &- before
    }

    /// Returns a one-line summary, or nil (after printing why) when the counter does not work.
    static func run() -> String? {
        // The first call of each probe may allocate runtime caches (metadata, …): warm up.
        blackHole(makeProbe())
        blackHole(makeArray().count)
        let object = count { blackHole(makeProbe()) }
        let array = count { blackHole(makeArray().count) }
        let aligned = count {
            let pointer = UnsafeMutableRawPointer.allocate(byteCount: 256, alignment: 64)
            blackHole(Int(bitPattern: pointer))
            pointer.deallocate()
        }
        var libc: UInt64 = 0
        #if canImport(Glibc)
        libc = count {
            let zeroed = calloc(4, 16)
            let grown = realloc(zeroed, 4096)
            blackHole(Int(bitPattern: grown))
            free(grown)
        }
        #endif
        let resolved = switchboard_malloc_counter_is_active() == 1
        let summary = "class instance +\(object), [UInt8] +\(array), 64-byte-aligned allocate +\(aligned), calloc+realloc +\(libc)"
        guard resolved, object >= 1, array >= 1, aligned >= 1, libc >= 2 else {
            print("error: the malloc counter is not interposed (\(summary), dynamic malloc is ours: \(resolved))")
            return nil
        }
        return summary
    }
}
