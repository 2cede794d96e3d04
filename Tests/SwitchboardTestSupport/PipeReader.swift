import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Reads a pipe (a child process's output) on a thread of its own with blocking reads: each
/// chunk goes to `onChunk`, then one empty chunk at the end of the stream.
///
/// Not `FileHandle.readabilityHandler`: on Linux the teardown of its dispatch read source can
/// leave libdispatch's epoll bookkeeping with a freed entry, and the process crashes in
/// `_dispatch_event_loop_drain` (swift-corelibs-libdispatch#949); the io_uring stage of a
/// fresh-clone run of this suite crashed there once. A blocking read registers nothing with
/// libdispatch. The thread reads a `dup` of the descriptor and closes it at the end, so the
/// handle may be closed or released at any time.
package final class PipeReader: Sendable {
    private let ended = TestLock(false)

    package init(_ handle: FileHandle, onChunk: @escaping @Sendable (Data) -> Void) {
        let fd = dup(handle.fileDescriptor)
        let ended = self.ended
        let thread = Thread {
            if fd >= 0 {
                var buffer = [UInt8](repeating: 0, count: 65_536)
                while true {
                    let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                    if n > 0 {
                        onChunk(Data(buffer[0..<n]))
                    } else if n < 0 && errno == EINTR {
                        continue
                    } else {
                        break
                    }
                }
                close(fd)
            }
            onChunk(Data())
            ended.withLock { $0 = true }
        }
        thread.start()
    }

    /// Whether the stream ended and `onChunk` had its last (empty) chunk.
    package var isEnded: Bool { ended.withLock { $0 } }

    /// Waits until the stream ended (true) or `timeout` passed (false: a writer still holds
    /// the pipe open, say a grandchild).
    package func waitUntilEnded(timeout: Duration = .seconds(10)) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while !isEnded {
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return true
    }
}
