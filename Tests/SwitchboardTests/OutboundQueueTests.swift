import Testing
@testable import Switchboard
import SwitchboardCore

/// A writer that takes at most `capacity` bytes in total, recording them.
private struct Sink {
    var capacity: Int
    var written: [UInt8] = []

    var calls = 0

    mutating func take(_ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer) -> OutboundQueue.WriteOutcome {
        calls += 1
        var total = 0
        for piece in [first, second] {
            let n = min(piece.count, capacity)
            written += piece.prefix(n)
            capacity -= n
            total += n
            if n < piece.count { break }
        }
        return .written(total)
    }
}

@Suite("OutboundQueue: one ordered, bounded path with one coalesced pong")
struct OutboundQueueTests {
    @Test func writesAppendsInOrderAndReleasesStorage() {
        var q = OutboundQueue()
        q.append { $0 += [1, 2, 3] }
        [UInt8]([4, 5]).withUnsafeBytes { q.append($0) }
        #expect(q.count == 5)
        var sink = Sink(capacity: 100)
        #expect(q.drain { sink.take($0, $1) } == .empty)
        #expect(sink.written == [1, 2, 3, 4, 5])
        #expect(q.isEmpty)
    }

    @Test func anArrayQueuedWhenEmptyIsTakenNotCopiedAndOrderHolds() {
        var q = OutboundQueue()
        let response = [UInt8](repeating: 7, count: 100)
        let address = response.withUnsafeBytes { UInt(bitPattern: $0.baseAddress) }
        q.append(adopting: response)
        var seen: UInt = 0
        var sink = Sink(capacity: 40)
        #expect(q.drain { first, second in
            if seen == 0 { seen = UInt(bitPattern: first.baseAddress) }
            return sink.take(first, second)
        } == .blocked)
        #expect(seen == address, "the queue wrote from a copy")
        // Not empty now: appended behind, in order (copying the storage the caller still shares).
        q.append(adopting: [8, 9])
        sink.capacity = 1_000
        #expect(q.drain { sink.take($0, $1) } == .empty)
        #expect(sink.written == [UInt8](repeating: 7, count: 100) + [8, 9])
        #expect(response == [UInt8](repeating: 7, count: 100), "the caller's array changed")
        #expect(q.isEmpty && q.storageCapacity == 0)
        // Behind a pong waiting in its slot, an adopted array still goes after it.
        q.setPong([0x8A, 0])
        q.append(adopting: [1])
        var after = Sink(capacity: 1_000)
        #expect(q.drain { after.take($0, $1) } == .empty)
        #expect(after.written == [0x8A, 0, 1])
    }

    @Test func partialWritesResumeWhereTheyStopped() {
        var q = OutboundQueue()
        q.append { $0 += Array(0..<10) }
        var sink = Sink(capacity: 4)
        #expect(q.drain { sink.take($0, $1) } == .blocked)
        #expect(q.count == 6)
        sink.capacity = 100
        #expect(q.drain { sink.take($0, $1) } == .empty)
        #expect(sink.written == Array(0..<10))
    }

    @Test func aNewerPongReplacesOneNotYetStarted() {
        var q = OutboundQueue()
        q.append { $0 += [1, 1] }
        let r1 = q.setPong([0xA, 1])
        #expect(!r1)
        q.append { $0 += [2, 2] }
        let r2 = q.setPong([0xB, 2, 2])
        #expect(r2)        // replaces, whatever its length
        let r3 = q.setPong([0xC, 3])
        #expect(r3)
        #expect(q.count == 6)
        var sink = Sink(capacity: 100)
        #expect(q.drain { sink.take($0, $1) } == .empty)
        // The pong keeps the place of the first one: between the frames around it.
        #expect(sink.written == [1, 1, 0xC, 3, 2, 2])
    }

    @Test func aFloodOfPongsBehindABlockedSocketHoldsOne() {
        var q = OutboundQueue()
        q.append { $0 += Array(repeating: 7, count: 1000) }
        var sink = Sink(capacity: 10)
        #expect(q.drain { sink.take($0, $1) } == .blocked)
        for i in 0..<100_000 { q.setPong([0x8A, 4] + withUnsafeBytes(of: UInt32(i)) { Array($0) }) }
        #expect(q.count == 990 + 6)
        #expect(q.holdsPong)
    }

    @Test func aPongStartedButNotFinishedIsNoLongerReplaced() {
        var q = OutboundQueue()
        q.setPong([0x8A, 3, 1, 2, 3])
        var sink = Sink(capacity: 2)
        #expect(q.drain { sink.take($0, $1) } == .blocked)
        #expect(!q.holdsPong)
        let r4 = q.setPong([0x8A, 1, 9])
        #expect(!r4)          // a new slot, after the rest of the first
        sink.capacity = 100
        #expect(q.drain { sink.take($0, $1) } == .empty)
        #expect(sink.written == [0x8A, 3, 1, 2, 3, 0x8A, 1, 9])
    }

    @Test func aFailingWriterStopsDraining() {
        var q = OutboundQueue()
        q.append { $0 += [1, 2] }
        #expect(q.drain { _, _ in .failed } == .failed)
        #expect(q.count == 2)
    }

    @Test func aPayloadByReferenceGoesAfterItsHeaderInOneWrite() {
        var q = OutboundQueue()
        q.append { $0 += [0x82, 4] }
        q.appendReference([1, 2, 3, 4])
        #expect(q.count == 6)
        var sink = Sink(capacity: 100)
        #expect(q.drain { sink.take($0, $1) } == .empty)
        #expect(sink.written == [0x82, 4, 1, 2, 3, 4])
        #expect(sink.calls == 1)
        #expect(q.isEmpty)
    }

    @Test func partialWritesAcrossHeaderAndReferenceKeepTheOrder() {
        var q = OutboundQueue()
        q.append { $0 += [0x82, 4] }
        q.appendReference([1, 2, 3, 4])
        var sink = Sink(capacity: 3)
        #expect(q.drain { sink.take($0, $1) } == .blocked)
        #expect(q.count == 3)
        sink.capacity = 1
        #expect(q.drain { sink.take($0, $1) } == .blocked)
        sink.capacity = 100
        #expect(q.drain { sink.take($0, $1) } == .empty)
        #expect(sink.written == [0x82, 4, 1, 2, 3, 4])
    }

    @Test func whatIsQueuedBehindAReferenceGoesAfterIt() {
        var q = OutboundQueue()
        q.append { $0 += [0x82, 3] }
        q.appendReference([1, 2, 3])
        var sink = Sink(capacity: 3)                 // header and the first payload byte
        #expect(q.drain { sink.take($0, $1) } == .blocked)
        q.append { $0 += [0x81, 1, 65] }             // copies the rest of the payload in first
        q.setPong([0x8A, 0])
        q.append { $0 += [0x82, 2] }
        q.appendReference([7, 8])
        sink.capacity = 100
        #expect(q.drain { sink.take($0, $1) } == .empty)
        #expect(sink.written == [0x82, 3, 1, 2, 3, 0x81, 1, 65, 0x8A, 0, 0x82, 2, 7, 8])
    }

    /// A producer woken at the low-water mark keeps the queue from ever emptying while a writer
    /// takes part of it at each write: the storage must stay bounded by what is unwritten
    /// (high-water mark plus one frame, about twice that with the moves), not grow by every byte
    /// ever sent. Checks the order of every byte too, pongs and payloads by reference included.
    @Test func storageStaysBoundedWhenTheQueueNeverEmpties() {
        let highWaterMark = 64 << 10, lowWaterMark = 16 << 10, frame = 3000
        var q = OutboundQueue()
        var next: UInt8 = 0                   // the byte the next append starts with
        var expected: UInt8 = 0               // the byte the writer must see next
        var written = 0, appended = 0, maxCapacity = 0
        var outOfOrder = 0
        func bytes(_ n: Int) -> [UInt8] {
            var b = [UInt8](repeating: 0, count: n)
            for i in 0..<n { b[i] = next; next = next &+ 1 }
            return b
        }
        var round = 0
        while written < 6 << 20 {
            round += 1
            // The producer fills up to just above the high-water mark.
            while q.count <= highWaterMark {
                switch round % 3 {
                case 0:
                    let header = bytes(2)
                    q.append { $0 += header }
                    q.appendReference(bytes(frame - 2))
                case 1:
                    let b = bytes(frame)
                    b.withUnsafeBytes { q.append($0) }
                default:
                    let b = bytes(frame)
                    q.append { $0 += b }
                }
                // A pong now and then (never replacing one: that would skip bytes of the order).
                if round % 7 == 0 && !q.holdsPong { q.setPong(bytes(6)) }
                appended += frame
            }
            maxCapacity = max(maxCapacity, q.storageCapacity)
            // The writer takes a bit at a time until the queue is at its low-water mark (where
            // the producer wakes), never all of it.
            while q.count > lowWaterMark {
                var budget = 7_001
                let result = q.drain { first, second in
                    var taken = 0
                    for piece in [first, second] {
                        let n = min(piece.count, budget)
                        for byte in piece.prefix(n) {
                            if byte != expected { outOfOrder += 1 }
                            expected = byte &+ 1
                        }
                        budget -= n
                        taken += n
                        if n < piece.count { break }
                    }
                    return .written(taken)
                }
                #expect(result == .blocked)
                written += 7_001
                maxCapacity = max(maxCapacity, q.storageCapacity)
            }
        }
        #expect(outOfOrder == 0)
        // Unbounded storage would reach the 6 MiB written; bounded, about 4 × (mark + frame).
        #expect(maxCapacity <= 4 * (highWaterMark + frame), "storage reached \(maxCapacity) bytes")
        var rest = 0
        #expect(q.drain { first, second in
            for byte in [first, second].joined() {
                if byte != expected { outOfOrder += 1 }
                expected = byte &+ 1
            }
            rest += first.count + second.count
            return .written(first.count + second.count)
        } == .empty)
        #expect(outOfOrder == 0)
        #expect(q.storageCapacity == 0)
    }
}

extension OutboundQueueTests {
    /// What a task-per-connection route queues for a peer that does not read (the silent-peers
    /// trigger): each echo is a header and its payload by reference, until the queue is above
    /// its 1 MiB high-water mark, then a keepalive ping or a close frame behind them. The queue's
    /// storage must stay close to the bytes it holds: copying the payloads into one contiguous
    /// array that doubles as it grows held 2 MiB of storage for 1.06 MiB queued, per connection.
    @Test func storageStaysCloseToTheQueuedBytesWhenPayloadsByReferenceBackUp() {
        var q = OutboundQueue()
        let highWaterMark = 1 << 20
        let message = 64 << 10
        var expected: UInt8 = 0
        func bytes(_ n: Int) -> [UInt8] {
            (0..<n).map { _ in defer { expected &+= 1 }; return expected }
        }
        var sent = 0
        // Storage beyond the queued bytes, at its most after any append.
        var mostSlack = 0
        while q.count <= highWaterMark {
            let header = bytes(4)
            q.append { $0 += header }
            q.appendReference(bytes(message))
            sent += 4 + message
            mostSlack = max(mostSlack, q.storageCapacity - q.count)
        }
        let ping = bytes(2)
        q.append { $0 += ping }
        sent += 2
        mostSlack = max(mostSlack, q.storageCapacity - q.count)
        #expect(q.count == sent)
        // Slack: at most a chunk of small frames being filled, and the payloads' own capacity.
        let slack = 2 * (64 << 10)
        #expect(mostSlack <= slack, "storage reached \(mostSlack) bytes above what was queued")
        // Written bytes are released as they go, not when the queue empties.
        var sink = Sink(capacity: sent / 2)
        #expect(q.drain { sink.take($0, $1) } == .blocked)
        #expect(q.storageCapacity <= q.count + slack + message, "storage \(q.storageCapacity) bytes for \(q.count) queued")
        sink.capacity = .max
        #expect(q.drain { sink.take($0, $1) } == .empty)
        var check: UInt8 = 0
        let inOrder = sink.written.allSatisfy { byte in defer { check &+= 1 }; return byte == check }
        #expect(inOrder && sink.written.count == sent)
        #expect(q.storageCapacity == 0)
    }

    /// A burst of small frames between two flushes (a broadcast to a slow subscriber) spans
    /// many chunks of storage: every byte comes out in order, and the storage stays close to
    /// what is queued.
    @Test func aBurstOfSmallFramesKeepsEveryByteInOrder() {
        var q = OutboundQueue()
        var expected: UInt8 = 0
        for _ in 0..<20_000 {
            let frame = (0..<18).map { _ in defer { expected &+= 1 }; return expected }
            q.append { $0 += frame }
        }
        #expect(q.count == 20_000 * 18)
        #expect(q.storageCapacity <= q.count + 2 * (64 << 10))
        var sink = Sink(capacity: .max)
        #expect(q.drain { sink.take($0, $1) } == .empty)
        var check: UInt8 = 0
        #expect(sink.written.count == 20_000 * 18)
        #expect(sink.written.allSatisfy { byte in defer { check &+= 1 }; return byte == check })
    }
}
