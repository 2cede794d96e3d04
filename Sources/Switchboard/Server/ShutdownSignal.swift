import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Waits for SIGINT or SIGTERM, for servers that shut down gracefully on Ctrl-C or `kill`.
public enum ShutdownSignal {
    /// Returns once the process receives SIGINT or SIGTERM (their default action is disabled).
    public static func wait() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let box = SignalSources(continuation: c)
            box.start()
        }
    }
}

private final class SignalSources: @unchecked Sendable {
    // Safety: sources and the continuation are touched only on `queue`.
    private let queue = DispatchQueue(label: "switchboard.signals")
    private var sources: [DispatchSourceSignal] = []
    private var continuation: CheckedContinuation<Void, Never>?

    init(continuation: CheckedContinuation<Void, Never>) {
        self.continuation = continuation
    }

    func start() {
        queue.sync {
            for sig in [SIGINT, SIGTERM] {
                signal(sig, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: sig, queue: queue)
                source.setEventHandler { [self] in fire() }
                source.resume()
                sources.append(source)
            }
        }
    }

    private func fire() {
        for s in sources { s.cancel() }
        sources = []
        for sig in [SIGINT, SIGTERM] { signal(sig, SIG_DFL) }
        continuation?.resume()
        continuation = nil
    }
}
