import Testing
@testable import Switchboard
import SwitchboardTestSupport

/// The event loop's timer heap: timers come out in deadline order, cancelled ones never, and
/// cancelled ones do not pile up until their deadlines (a server whose connections come and go
/// cancels nearly every timer it sets: each handshake's, each connection's keepalive).
@Suite("Timer heap")
struct TimerHeapTests {
    @Test func expiredTimersComeOutInDeadlineOrderWithoutTheCancelledOnes() {
        var heap = TimerHeap()
        var generator = SplitMix64(seed: 7)
        var kept: [UInt64] = []
        for i in 0..<5_000 {
            let deadline = generator.next() % 1_000_000
            let timer = EventLoopClosureTimer(deadline: deadline, body: {})
            heap.insert(timer)
            if i % 3 == 0 { timer.cancel() } else { kept.append(deadline) }
        }
        var out: [UInt64] = []
        while let timer = heap.popExpired(now: .max) { out.append(timer.deadline) }
        #expect(out == kept.sorted())
        #expect(heap.nextDeadline == nil)
    }

    @Test func cancelledTimersAreDroppedBeforeTheirDeadlines() {
        var heap = TimerHeap()
        let live = (0..<100).map { EventLoopClosureTimer(deadline: 1_000 + UInt64($0), body: {}) }
        for timer in live { heap.insert(timer) }
        // A churning server: every timer cancelled soon after it was set, far from its deadline.
        for i in 0..<100_000 {
            let timer = EventLoopClosureTimer(deadline: 10_000_000 + UInt64(i), body: {})
            heap.insert(timer)
            timer.cancel()
        }
        #expect(heap.count <= 2 * (100 + TimerHeap.minimumCompaction), "\(heap.count) timers held")
        #expect(heap.nextDeadline == 1_000)
        var out: [UInt64] = []
        while let timer = heap.popExpired(now: .max) { out.append(timer.deadline) }
        #expect(out == live.map(\.deadline))
    }
}
