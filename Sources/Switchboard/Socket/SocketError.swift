#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A failed system call: the operation and `errno`.
public struct SocketError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The `errno` value.
    public var errno: Int32
    /// The system call or step that failed.
    public var operation: String

    /// Creates an error for `operation` (e.g. `"connect"`) that failed with `errno`.
    package init(errno: Int32, operation: String) {
        self.errno = errno
        self.operation = operation
    }

    /// `<operation> failed: <strerror text> (errno <n>)`.
    public var description: String {
        "\(operation) failed: \(String(cString: strerror(errno))) (errno \(errno))"
    }
}
