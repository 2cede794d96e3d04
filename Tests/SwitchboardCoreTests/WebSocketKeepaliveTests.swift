import Testing
import SwitchboardCore

@Suite("RFC 6455 §5.5.2–5.5.3 keepalive state machine")
struct WebSocketKeepaliveTests {
    private static let second: UInt64 = 1_000_000_000

    private func started(interval: UInt64 = 20 * second, timeout: UInt64 = 10 * second) -> WebSocketKeepalive {
        var k = WebSocketKeepalive(interval: interval, timeout: timeout)
        k.start(now: 0)
        return k
    }

    @Test func nothingIsDueBeforeTheFirstInterval() {
        var k = started()
        #expect(k.nextDeadline == 20 * Self.second)
        #expect(k.tick(now: 20 * Self.second - 1) == nil)
        #expect(!k.isAwaitingPong)
    }

    @Test func pingsAtTheIntervalWithACounterPayload() {
        var k = started()
        #expect(k.tick(now: 20 * Self.second) == .sendPing([0, 0, 0, 0, 0, 0, 0, 1]))
        #expect(k.isAwaitingPong)
        // Next deadline: the pong timeout (10 s) comes before the next ping (20 s).
        #expect(k.nextDeadline == 30 * Self.second)
    }

    @Test func matchingPongAnswersWithTheRoundTripTime() {
        var k = started()
        guard case .sendPing(let payload)? = k.tick(now: 20 * Self.second) else {
            Issue.record("expected a ping")
            return
        }
        #expect(k.receivedPong(payload, now: 20 * Self.second + 1_500) == 1_500)
        #expect(!k.isAwaitingPong)
        #expect(k.nextDeadline == 40 * Self.second)
        #expect(k.tick(now: 40 * Self.second) == .sendPing([0, 0, 0, 0, 0, 0, 0, 2]))
    }

    @Test func unsolicitedOrStalePongsAreIgnored() {
        var k = started()
        _ = k.tick(now: 20 * Self.second)
        #expect(k.receivedPong([], now: 21 * Self.second) == nil)
        #expect(k.receivedPong([0, 0, 0, 0, 0, 0, 0, 9], now: 21 * Self.second) == nil)
        #expect(k.isAwaitingPong)
    }

    @Test func unansweredPingTimesOutOnceAndStops() {
        var k = started()
        _ = k.tick(now: 20 * Self.second)
        #expect(k.tick(now: 30 * Self.second - 1) == nil)
        #expect(k.tick(now: 30 * Self.second) == .timedOut)
        #expect(k.nextDeadline == nil)
        #expect(k.tick(now: 100 * Self.second) == nil)
    }

    @Test func noSecondPingWhileOneIsOutstanding() {
        // Timeout longer than the interval: the interval passes with the ping unanswered.
        var k = started(interval: 5 * Self.second, timeout: 12 * Self.second)
        #expect(k.tick(now: 5 * Self.second) != nil)
        #expect(k.tick(now: 10 * Self.second) == nil)
        #expect(k.tick(now: 15 * Self.second) == nil)
        #expect(k.tick(now: 17 * Self.second) == .timedOut)
    }

    @Test func stopCancelsEverything() {
        var k = started()
        _ = k.tick(now: 20 * Self.second)
        k.stop()
        #expect(k.nextDeadline == nil)
        #expect(k.tick(now: 60 * Self.second) == nil)
    }

    @Test func anOverduePongWhileNotReadingRestartsItsWaitInsteadOfTimingOut() {
        var k = started()
        guard case .sendPing(let payload)? = k.tick(now: 20 * Self.second) else {
            Issue.record("expected a ping")
            return
        }
        // Backpressure: we are not reading the peer when the pong is due.
        #expect(k.tick(now: 30 * Self.second, reading: false) == nil)
        #expect(k.isAwaitingPong)
        #expect(k.nextDeadline == 40 * Self.second)
        // Reading again: the pong that was waiting arrives.
        #expect(k.receivedPong(payload, now: 35 * Self.second) == 15 * Self.second)
        // Or, had it not: a full timeout after the restart, the peer is declared dead.
        var dead = started()
        _ = dead.tick(now: 20 * Self.second)
        _ = dead.tick(now: 30 * Self.second, reading: false)
        #expect(dead.tick(now: 40 * Self.second - 1) == nil)
        #expect(dead.tick(now: 40 * Self.second) == .timedOut)
    }
}
