import Testing
@testable import SwitchboardCore

@Suite("A topic's bounded replay log")
struct TopicReplayLogTests {
    typealias Log = TopicReplayLog<String>
    let t0 = ContinuousClock.now

    func log(messages: Int = 10, bytes: Int = 1 << 20, age: Duration = .seconds(60)) -> Log {
        Log(epoch: "e1", limits: .init(maxMessages: messages, maxBytes: bytes, maxAge: age))
    }

    func at(_ sequence: UInt64) -> TopicPosition { TopicPosition(epoch: "e1", sequence: sequence) }
    func at(_ e: String, _ sequence: UInt64) -> TopicPosition { TopicPosition(epoch: e, sequence: sequence) }

    func recovered(_ replay: Log.Replay) -> [String]? {
        if case .recovered(let elements) = replay { return elements }
        return nil
    }

    func failure(_ replay: Log.Replay) -> TopicResumeFailure? {
        if case .failed(let reason) = replay { return reason }
        return nil
    }

    @Test func numbersFromOneAndReplaysEverythingAfterAPosition() {
        var log = log()
        #expect(log.position == at(0))
        #expect(log.append("a", bytes: 1, now: t0) == 1)
        #expect(log.append("b", bytes: 1, now: t0) == 2)
        #expect(log.append("c", bytes: 1, now: t0) == 3)
        #expect(log.position == at(3))
        #expect(recovered(log.replay(after: at(0), now: t0)) == ["a", "b", "c"])
        #expect(recovered(log.replay(after: at(1), now: t0)) == ["b", "c"])
        #expect(recovered(log.replay(after: at(2), now: t0)) == ["c"])
        #expect(recovered(log.replay(after: at(3), now: t0)) == [])
        #expect(log.count == 3 && log.bytes == 3)
    }

    @Test func positionsAheadOfTheNewestOrFromAnotherEpochFail() {
        var log = log()
        log.append("a", bytes: 1, now: t0)
        #expect(failure(log.replay(after: at(2), now: t0)) == .unknownPosition)
        #expect(failure(log.replay(after: at(.max), now: t0)) == .unknownPosition)
        #expect(failure(log.replay(after: at("other", 0), now: t0)) == .epochChanged)
        #expect(failure(log.replay(after: at("other", 1), now: t0)) == .epochChanged)
    }

    @Test func countLimitDropsTheOldestAndResumingBeforeThemFails() {
        var log = log(messages: 3)
        for s in ["a", "b", "c", "d", "e"] { log.append(s, bytes: 1, now: t0) }
        #expect(log.count == 3)
        #expect(recovered(log.replay(after: at(2), now: t0)) == ["c", "d", "e"])   // the oldest kept is next
        #expect(failure(log.replay(after: at(1), now: t0)) == .bufferExceeded)     // "b" is gone
        #expect(failure(log.replay(after: at(0), now: t0)) == .bufferExceeded)
        #expect(recovered(log.replay(after: at(5), now: t0)) == [])               // nothing missed: fine
    }

    @Test func byteLimitKeepsTheNewestEvenWhenLarger() {
        var log = log(bytes: 10)
        log.append("a", bytes: 4, now: t0)
        log.append("b", bytes: 4, now: t0)
        #expect(log.count == 2 && log.bytes == 8)
        log.append("c", bytes: 4, now: t0)                                       // 12 > 10: "a" goes
        #expect(log.count == 2 && log.bytes == 8)
        #expect(recovered(log.replay(after: at(1), now: t0)) == ["b", "c"])
        log.append("huge", bytes: 100, now: t0)
        #expect(log.count == 1 && log.bytes == 100)
        #expect(recovered(log.replay(after: at(3), now: t0)) == ["huge"])
        #expect(failure(log.replay(after: at(2), now: t0)) == .bufferExceeded)
    }

    @Test func agedMessagesAreNotReplayedAndExpireDropsThem() {
        var log = log(age: .seconds(10))
        log.append("old", bytes: 3, now: t0)
        log.append("new", bytes: 3, now: t0 + .seconds(8))
        let later = t0 + .seconds(11)
        // "old" is past its age: resuming before it fails even before expire ran.
        #expect(failure(log.replay(after: at(0), now: later)) == .bufferExceeded)
        #expect(recovered(log.replay(after: at(1), now: later)) == ["new"])
        log.expire(now: later)
        #expect(log.count == 1 && log.bytes == 3)
        log.expire(now: t0 + .seconds(30))
        #expect(log.isEmpty && log.bytes == 0)
        // An empty history still knows where it is: nothing missed at the newest position.
        #expect(recovered(log.replay(after: at(2), now: t0 + .seconds(30))) == [])
        #expect(failure(log.replay(after: at(1), now: t0 + .seconds(30))) == .bufferExceeded)
    }

    @Test func restartStartsANewEpochWithoutTheOldMessages() {
        var log = log()
        log.append("a", bytes: 1, now: t0)
        log.append("b", bytes: 1, now: t0)
        log.restart(epoch: "e2")
        #expect(log.isEmpty && log.bytes == 0)
        #expect(failure(log.replay(after: at(1), now: t0)) == .epochChanged)
        #expect(log.position == at("e2", 2))
        #expect(log.append("c", bytes: 1, now: t0) == 3)
        #expect(recovered(log.replay(after: at("e2", 2), now: t0)) == ["c"])
        #expect(failure(log.replay(after: at("e2", 1), now: t0)) == .bufferExceeded)
    }

    /// Many appends through the ring's compaction: every position still maps to its message.
    @Test func longRunsKeepExactlyTheNewestMessages() {
        var log = log(messages: 50)
        for i in 1...1_000 {
            #expect(log.append("m\(i)", bytes: 1, now: t0) == UInt64(i))
            if i % 97 == 0 {
                let after = UInt64(i - 50)
                #expect(recovered(log.replay(after: at(after), now: t0)) == (i - 49...i).map { "m\($0)" })
                #expect(failure(log.replay(after: at(after - 1), now: t0)) == .bufferExceeded)
            }
        }
        #expect(log.count == 50 && log.bytes == 50)
    }

    @Test func limitsAreClampedToSaneValues() {
        let limits = Log.Limits(maxMessages: 0, maxBytes: -5, maxAge: .seconds(1))
        #expect(limits.maxMessages == 1 && limits.maxBytes == 0)
        var log = Log(epoch: "e", limits: limits)
        log.append("a", bytes: -3, now: t0)
        log.append("b", bytes: 2, now: t0)
        #expect(log.count == 1 && log.bytes == 2)
    }

    @Test func positionDescriptionIsEpochColonSequence() {
        #expect(at("abc", 42).description == "abc:42")
        #expect(TopicResumeFailure.bufferExceeded.rawValue == "buffer_exceeded")
    }
}
