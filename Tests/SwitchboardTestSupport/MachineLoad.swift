import Foundation

/// How busy the machine is, for the few tests whose subject is a wall-clock deadline (a token's
/// lifetime, its refresh at 80%): they size that deadline for the machine they run on.
///
/// A token test needs its round trips (upgrade, refresh, reply) to take a small share of the
/// token's lifetime. On a machine running more runnable threads than it has cores (the suite's
/// own parallel tests, ThreadSanitizer, a build beside it), each round trip takes longer in
/// proportion, so the lifetimes grow in the same proportion: the ratio of the one-minute load
/// average to the online cores, at least 1 and at most ``maximumFactor``.
package enum MachineLoad {
    /// The most a lifetime is stretched (a test then lasts at most this many times longer).
    package static let maximumFactor = 4.0

    /// Load average ÷ cores, within 1...``maximumFactor`` (1 where /proc/loadavg is missing).
    package static var factor: Double {
        let cores = max(1, ProcessInfo.processInfo.activeProcessorCount)
        guard let text = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8),
              let first = text.split(separator: " ").first, let load = Double(first), load.isFinite else {
            return 1
        }
        return min(maximumFactor, max(1, load / Double(cores)))
    }

    /// Waits until this process is responsive: five 20 ms sleeps in a row each wake within
    /// 100 ms. When the suite starts, hundreds of tests start at once on a cooperative pool of
    /// one thread per core and a task can wait 15-25 s to run (seen in fresh-clone runs); a token
    /// minted then has expired before its test's first round trip. Gives up (and returns) after
    /// `limit`: a machine that never settles gets the longer lifetimes of ``factor`` only.
    package static func waitUntilResponsive(limit: Duration = .seconds(180)) async {
        let clock = ContinuousClock()
        let start = clock.now
        var prompt = 0
        while prompt < 5 && clock.now - start < limit {
            let before = clock.now
            try? await Task.sleep(for: .milliseconds(20))
            prompt = clock.now - before < .milliseconds(100) ? prompt + 1 : 0
        }
    }

    /// `duration` stretched by ``factor``.
    package static func scaled(_ duration: Duration, by factor: Double = MachineLoad.factor) -> Duration {
        duration * factor
    }
}
