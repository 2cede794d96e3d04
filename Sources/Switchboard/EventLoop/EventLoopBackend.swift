#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// How an ``EventLoop`` waits for its sockets.
///
/// - ``epoll``: readiness (`epoll_wait`), then one `read` per readable socket and one `writev`
///   per flush. Available on every Linux.
/// - ``ioUring``: completions from an io_uring ring: multishot receive into a ring of provided
///   buffers (no `read` per message), readiness polls for writing and accepting, and one
///   `io_uring_enter` per loop iteration for all of them. Needs Linux 6.1 or later and a
///   process allowed to call `io_uring_setup` (Docker's default seccomp profile refuses it).
/// - ``automatic``: the `SWITCHBOARD_EVENT_LOOP` environment variable (`epoll` or `io_uring`)
///   when it is set, otherwise ``epoll``: io_uring is not yet the automatic choice, see
///   `docs/performance.md`.
public enum EventLoopBackend: Sendable, Hashable, CustomStringConvertible {
    /// `SWITCHBOARD_EVENT_LOOP` when set, otherwise ``epoll``.
    case automatic
    /// Readiness through `epoll_wait`.
    case epoll
    /// Completions through an io_uring ring (Linux 6.1 or later).
    case ioUring

    /// `automatic`, `epoll` or `io_uring` (the spelling `SWITCHBOARD_EVENT_LOOP` takes).
    public var description: String {
        switch self {
        case .automatic: "automatic"
        case .epoll: "epoll"
        case .ioUring: "io_uring"
        }
    }

    /// The environment variable ``automatic`` reads.
    public static let environmentVariable = "SWITCHBOARD_EVENT_LOOP"

    /// Whether this kernel and process let the io_uring backend run (probed once: a ring with
    /// the set-up flags and a provided-buffer ring the backend uses).
    public static var isIOUringAvailable: Bool { IOURingDriver.probe() == 0 }

    /// The backend ``automatic`` stands for here (``epoll`` or ``ioUring``); explicit choices
    /// are themselves. Throws for an unknown `SWITCHBOARD_EVENT_LOOP` value, and for io_uring
    /// where it cannot run (with the reason `io_uring_setup` gave).
    package func resolved(environment: String? = Self.environmentValue()) throws(SocketError) -> EventLoopBackend {
        var choice = self
        if choice == .automatic {
            switch environment?.lowercased() {
            case nil, "", "automatic": choice = .epoll
            case "epoll": choice = .epoll
            case "io_uring", "iouring", "io-uring": choice = .ioUring
            case let other?:
                throw SocketError(errno: EINVAL, operation: "\(Self.environmentVariable)=\(other) (expected epoll or io_uring)")
            }
        }
        if choice == .ioUring {
            let result = IOURingDriver.probe()
            if result != 0 { throw SocketError(errno: result, operation: "io_uring_setup (the io_uring event loop)") }
        }
        return choice
    }

    package static func environmentValue() -> String? {
        getenv(environmentVariable).map { String(cString: $0) }
    }
}
