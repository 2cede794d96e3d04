import Foundation
import SwitchboardCore

/// Turns a connection's messages into lines (``WebSocketConnection/lines()``): the adapter keeps
/// the bytes of a line still in progress, lines may span any number of messages.
///
/// Allocated on first use, so connections that never read lines pay nothing for it.
final class LineReader: @unchecked Sendable {
    // Safety: touched only from `WebSocketConnection.nextLines()`, isolated to its connection.
    private var buffer: LineBuffer
    private var ended = false

    /// Most lines handed out per batch: a message of many short lines is split into several
    /// batches, so a batch never holds much more than what the inbound queue already bounds.
    static let batchLimit = 256

    init(configuration: WebSocketConfiguration) {
        buffer = LineBuffer(maxLineLength: configuration.maxLineLength, emptyLines: configuration.emptyLines)
    }

    /// The lines available now (at most ``batchLimit``), waiting only when there is none; nil at
    /// the end (a final unterminated line is delivered first). Messages already received are
    /// split without waiting, so a consumer that keeps up gets every line of a read in one call.
    /// A line longer than ``WebSocketConfiguration/maxLineLength`` fails the connection with
    /// 1009 (the lines before it are still delivered).
    func nextBatch(from connection: isolated WebSocketConnection) async -> [Data]? {
        var batch: [Data] = []
        while !ended {
            while batch.count < Self.batchLimit, let line = buffer.nextLine({ Data($0) }) { batch.append(line) }
            if batch.count >= Self.batchLimit { return batch }
            let message: WebSocketMessage?
            if batch.isEmpty {
                message = try? await connection.receive()
            } else {
                // Something to hand out already: take more only if it is there now.
                guard let queued = connection.takeQueuedMessage() else { return batch }
                message = queued
            }
            guard let message else {
                ended = true
                if let last = buffer.finish() { batch.append(Data(last)) }
                break
            }
            do {
                switch message {
                case .text(let bytes), .binary(let bytes): try buffer.append(bytes)
                }
            } catch {
                // The lines completed before the offending one are still delivered (all of
                // them: nothing follows in this stream).
                while let line = buffer.nextLine({ Data($0) }) { batch.append(line) }
                ended = true
                buffer = LineBuffer(maxLineLength: 0, emptyLines: .skip)
                connection.failLineTooLong()
            }
        }
        return batch.isEmpty ? nil : batch
    }
}

/// The lines of ``LineReader`` batches, one at a time: what `AsyncStream<Data>` of lines pulls
/// from. A consumer that keeps up costs one executor hop per batch, not per line: the stream's
/// closure takes a line with ``pop()`` (synchronous, no async frame) and calls
/// ``refill(_:)`` only when the batch is used up.
final class LineBatchBuffer: Sendable {
    private let lines = Locked<(batch: [Data], next: Int)>(([], 0))

    /// The next line of the current batch, if any.
    func pop() -> Data? {
        lines.withLock { state in
            guard state.next < state.batch.count else {
                if !state.batch.isEmpty { state = ([], 0) }
                return nil
            }
            let line = state.batch[state.next]
            state.next += 1
            return line
        }
    }

    /// Fetches the next batch and returns its first line; nil once `fetch` returns nil.
    func refill(_ fetch: () async -> [Data]?) async -> Data? {
        guard let batch = await fetch(), let first = batch.first else { return nil }
        lines.withLock { state in
            // One consumer at a time (AsyncStream's rule), so nothing was added meanwhile.
            state = (batch, 1)
        }
        return first
    }
}
