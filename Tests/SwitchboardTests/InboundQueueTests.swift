import Testing
import SwitchboardCore
@testable import Switchboard

@Suite("InboundQueue: bounded, one receiver")
struct InboundQueueTests {
    @Test func reportsFullAboveTheHighWaterMarkAndResumesAtTheLowOne() {
        var q = InboundQueue(highWaterMark: 10, lowWaterMark: 4)
        #expect(q.push(.binary([UInt8](repeating: 0, count: 6))) == .queued)
        #expect(q.push(.binary([UInt8](repeating: 0, count: 6))) == .full)
        #expect(q.byteCount == 12)
        let first = q.pop()
        #expect(first?.resumeReading == false)        // 6 bytes left: above the low mark
        let second = q.pop()
        #expect(second?.resumeReading == true)        // 0 left
        #expect(q.pop() == nil)
    }

    @Test func aWaitingReceiverGetsTheMessageDirectly() async {
        let queue = Locked(InboundQueue(highWaterMark: 10, lowWaterMark: 4))
        let message: WebSocketMessage? = await withUnsafeContinuation { c in
            let (waiting, pushed) = queue.withLock { q in (q.wait(c), q.push(.text([65]))) }
            #expect(waiting)
            #expect(pushed == .handedToReceiver)
        }
        #expect(message == .text([65]))
        #expect(queue.withLock { $0.isEmpty })
    }

    @Test func aSecondReceiverIsRefusedAndTheFirstKeepsWaiting() async {
        let queue = Locked(InboundQueue(highWaterMark: 10, lowWaterMark: 4))
        let (registered, signal) = AsyncStream<Void>.makeStream()
        async let first: WebSocketMessage? = withUnsafeContinuation { c in
            let waiting = queue.withLock { $0.wait(c) }
            #expect(waiting)
            signal.yield()
        }
        for await _ in registered { break }
        let marker = WebSocketMessage.text([0xEE])
        let second: WebSocketMessage? = await withUnsafeContinuation { c in
            if !queue.withLock({ $0.wait(c) }) { c.resume(returning: marker) }   // refused: never stored
        }
        #expect(second == marker)
        let pushed = queue.withLock { $0.push(.text([65])) }
        #expect(pushed == .handedToReceiver)
        #expect(await first == .text([65]))
    }
}
