import Foundation

/// The lines a ``SocketAdapter`` receives, as its own `AsyncSequence`: the same lines, in the same
/// order, with the same ending as the `AsyncStream<Data>` that ``SocketAdapter/connect(to:)``
/// returns (which is built on this sequence), at a fraction of the cost per line.
///
/// Take it from ``SocketAdapter/connectLines(to:)`` where lines are many and small, or where the
/// loop runs on an actor (the main actor of a command-line tool's top-level code, an app's UI
/// actor):
///
/// - A line already received is handed over without suspending and on the caller's own
///   executor (`next(isolation:)`); an `AsyncStream` element costs a stream step in the
///   standard library (about 0.35 µs here) and, when the loop runs on an actor, two thread
///   switches (off the actor to run the stream's closure, back to it with the element: about
///   8 µs).
/// - Lines come from the connection in batches (everything one read completed, up to 256
///   lines): the loop waits, and hops to the adapter, once per batch.
///
/// One consumer at a time, as with `AsyncStream`: two tasks iterating at once each get some of
/// the lines. Cancelling the consuming task while it waits closes the connection with 1001
/// (going away); lines it had already received are still handed out, then the sequence ends.
public struct SocketLines: AsyncSequence, Sendable {
    public typealias Element = Data
    public typealias Failure = Never

    let adapter: SocketAdapter
    let buffer: LineBatchBuffer

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(lines: self)
    }

    /// The iterator. Its state lives in the sequence, so iterators made from the same sequence
    /// share it (each line goes to one of them).
    public struct AsyncIterator: AsyncIteratorProtocol {
        let lines: SocketLines

        /// The next line, or nil once the adapter's last connection ended and every line it
        /// received was handed out.
        public mutating func next() async -> Data? {
            if let line = lines.buffer.pop() { return line }
            return await lines.fetch()
        }

        /// The next line, taken on the caller's executor: no hop while lines are buffered.
        public mutating func next(isolation actor: isolated (any Actor)?) async -> Data? {
            if let line = lines.buffer.pop() { return line }
            return await lines.fetch()
        }
    }

    /// Waits for the next batch and returns its first line.
    func fetch() async -> Data? {
        let adapter = adapter
        let buffer = buffer
        return await withTaskCancellationHandler {
            await buffer.refill { await adapter.nextLines() }
        } onCancel: {
            Task { await adapter.close(code: .goingAway) }
        }
    }
}
