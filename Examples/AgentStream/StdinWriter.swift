import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// An agent process's stdin, written without blocking any thread: the descriptor is
/// non-blocking, writes run on a serial queue of their own, and what the pipe does not take
/// yet waits (at most ``maxPending`` bytes) for a write-readiness source. A process that does not
/// read its stdin therefore never stalls the cooperative pool (nor any other thread).
///
/// Writes after ``close()``, after the process stopped reading (`EPIPE`), or beyond the bound
/// are dropped; beyond the bound stdin is closed, so the process sees end of file rather than a
/// truncated line.
final class StdinWriter: @unchecked Sendable {
    // Safety: `fd`, `pending`, `offset` and `source` are touched only on `queue`.
    private let queue = DispatchQueue(label: "agent-stream.stdin")
    private var fd: Int32
    private var pending: [UInt8] = []
    private var offset = 0
    private var source: (any DispatchSourceWrite)?

    /// Bytes waiting for the pipe at most: a prompt is at most one inbound message, and
    /// permission answers are small. 8 MiB is far above both; a process that reads nothing
    /// holds at most this much of our memory.
    static let maxPending = 8 << 20

    /// Takes ownership of `fd` (the pipe's write end): it is made non-blocking and closed by
    /// ``close()``.
    init(fd: Int32) {
        self.fd = fd
        let flags = fcntl(fd, F_GETFL)
        if flags >= 0 { _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
    }

    /// Queues `text` for the process; returns at once.
    func write(_ text: String) {
        let bytes = Array(text.utf8)
        queue.async { self.enqueue(bytes) }
    }

    /// Closes stdin (what is still pending is dropped): the process sees end of file.
    func close() {
        queue.async { self.closeNow() }
    }

    private func enqueue(_ bytes: [UInt8]) {
        guard fd >= 0 else { return }
        guard pending.count - offset + bytes.count <= Self.maxPending else {
            log("agent stdin: more than \(Self.maxPending) bytes the process does not read; stdin closed")
            closeNow()
            return
        }
        pending += bytes
        flush()
    }

    /// Writes what the pipe takes; on `EAGAIN` waits for the descriptor to be writable.
    private func flush() {
        while fd >= 0, offset < pending.count {
            let n = pending.withUnsafeBytes { buffer in
                Glibc.write(fd, buffer.baseAddress.map { $0 + offset }, buffer.count - offset)
            }
            if n > 0 {
                offset += n
            } else if n < 0, errno == EINTR {
                continue
            } else if n < 0, errno == EAGAIN || errno == EWOULDBLOCK {
                waitForWritable()
                return
            } else {
                // EPIPE (SIGPIPE is ignored by the server) or another error: the process is gone.
                closeNow()
                return
            }
        }
        pending = []
        offset = 0
        source?.cancel()
        source = nil
    }

    private func waitForWritable() {
        guard source == nil else { return }
        let writable = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        writable.setEventHandler { [weak self] in self?.flush() }
        writable.resume()
        source = writable
    }

    private func closeNow() {
        guard fd >= 0 else { return }
        let closing = fd
        fd = -1
        pending = []
        offset = 0
        if let source {
            // The descriptor is closed once the source no longer watches it.
            source.setCancelHandler { _ = Glibc.close(closing) }
            source.cancel()
            self.source = nil
        } else {
            _ = Glibc.close(closing)
        }
    }
}
