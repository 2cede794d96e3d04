#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import SwitchboardTestSupport

/// What the test process runs under, for tests that size their work to it.
enum TestEnvironment {
    /// True when this process runs under ThreadSanitizer (`swift test --sanitize=thread`): the
    /// TSan runtime, linked into the instrumented executable, exports `__tsan_init`. Everything
    /// then runs 5–10× slower, and the example binaries found next to the test bundle are the
    /// TSan builds too.
    static let isThreadSanitized: Bool = {
        guard let main = dlopen(nil, RTLD_NOW) else { return false }
        return dlsym(main, "__tsan_init") != nil
    }()

    /// `normal`, or `tsan` when running under ThreadSanitizer.
    static func sized<T>(_ normal: T, tsan: T) -> T { isThreadSanitized ? tsan : normal }

    /// A token lifetime: `normal`, or `tsan` under ThreadSanitizer, stretched by the machine's
    /// load (``MachineLoad``) so that the round trips it must cover keep their share of it.
    static func lifetime(_ normal: Duration, tsan: Duration, load: Double = MachineLoad.factor) -> Duration {
        sized(normal, tsan: tsan) * load
    }
}

/// Waits until `condition` holds for the value `observe` returns, polling (10 ms at first, backing
/// off to 250 ms, since some observations — /proc scans — cost CPU the server needs). Gives up,
/// returning false, only when the observed value has not changed for `stall`: slow progress
/// (ThreadSanitizer, a loaded machine) is waited out, a stuck state is not.
func waitWhileProgressing<Value: Equatable>(stall: Duration = .seconds(30),
                                            _ observe: () async -> Value,
                                            until condition: (Value) -> Bool) async -> Bool {
    var last = await observe()
    var lastChange = ContinuousClock.now
    var interval = Duration.milliseconds(10)
    while !condition(last) {
        if ContinuousClock.now - lastChange >= stall { return false }
        try? await Task.sleep(for: interval)
        interval = min(interval * 2, .milliseconds(250))
        let value = await observe()
        if value != last {
            last = value
            lastChange = .now
        }
    }
    return true
}
