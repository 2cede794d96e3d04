import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Waits for SIGINT or SIGTERM, for servers that shut down gracefully on Ctrl-C or `kill`
/// without swift-service-lifecycle (with it, run the server in a `ServiceGroup` instead: see
/// ``WebSocketServer/run()``).
public enum ShutdownSignal {
    /// Returns once the process receives SIGINT or SIGTERM.
    ///
    /// While waiting, the two signals' default action (ending the process) is replaced by this
    /// wait; when one arrives, the dispositions the process had before are restored, so a second
    /// Ctrl-C behaves as it did before the call.
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
    /// The dispositions in force before ``start()``, restored by ``fire()``.
    private var previous: [(Int32, sighandler_t?)] = []

    init(continuation: CheckedContinuation<Void, Never>) {
        self.continuation = continuation
    }

    func start() {
        queue.sync {
            for sig in [SIGINT, SIGTERM] {
                previous.append((sig, signal(sig, SIG_IGN)))
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
        for (sig, handler) in previous { signal(sig, handler) }
        previous = []
        continuation?.resume()
        continuation = nil
    }
}
