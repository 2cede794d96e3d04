import Testing
@testable import Switchboard

/// The listener's pause after a failed accept grows from 10 ms to 1 s, comes back to 10 ms after
/// an accept, and reports one episode per run of failures.
@Suite("Listener: accept backoff")
struct AcceptBackoffTests {
    @Test func pauseDoublesUpToOneSecondAndIsShortAgainAfterAnAccept() {
        var backoff = AcceptBackoff()
        let pauses = (0..<10).map { _ in backoff.failed().pause }
        #expect(pauses == [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000].map { Duration.milliseconds($0) })
        backoff.accepted()
        let afterAccept = backoff.failed().pause
        #expect(afterAccept == .milliseconds(10))
    }

    @Test func anEpisodeIsReportedOnceAndEndsWhenTheBacklogIsEmpty() {
        var backoff = AcceptBackoff()
        let nothingToEnd = backoff.caughtUp()               // no failure: no episode to end
        #expect(nothingToEnd == nil)
        var starts = [backoff.failed().startsEpisode, backoff.failed().startsEpisode]
        backoff.accepted()                                  // a descriptor freed: still catching up
        starts.append(backoff.failed().startsEpisode)
        #expect(starts == [true, false, false])
        let pauses = backoff.caughtUp()
        #expect(pauses == 3)
        #expect(backoff == AcceptBackoff())
        let next = backoff.failed().startsEpisode           // a new episode
        #expect(next)
    }
}
