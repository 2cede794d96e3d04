/// When a listener that cannot accept (out of descriptors) tries again, and when to say so.
///
/// `accept` failing with `EMFILE`/`ENFILE` leaves the connection in the backlog, so a
/// level-triggered listener is woken again at once: retrying on every wake-up spins the loop
/// that also serves the connections. The listener stops watching its socket instead and tries
/// again after a pause that starts short, so that a descriptor freed by a closing connection is
/// used at once, and doubles up to a bound, so that a server held at its limit costs a few
/// wake-ups per second. A successful accept brings the pause back to the start.
///
/// An episode runs from the first failure until the listener has caught up (the backlog is
/// empty): the failure is logged once per episode, however many accepts fail in it.
///
/// Pure: the listener owns the clock and the timer.
struct AcceptBackoff: Equatable {
    /// The first pause (10 ms: short enough to go unnoticed by a client in the backlog, long
    /// enough that a server at its limit does not spin).
    static let firstPause: Duration = .milliseconds(10)
    /// The longest pause (1 s: a client waits at most this long after a descriptor is freed).
    static let longestPause: Duration = .seconds(1)

    /// The pause after the next failure.
    private(set) var nextPause: Duration = Self.firstPause
    /// Accepts have failed since the listener last caught up.
    private(set) var inEpisode = false
    /// Pauses in the current episode.
    private(set) var pauses = 0

    /// An accept failed: how long to pause, and whether this starts an episode (log it then).
    mutating func failed() -> (pause: Duration, startsEpisode: Bool) {
        let pause = nextPause
        nextPause = min(nextPause * 2, Self.longestPause)
        let starts = !inEpisode
        inEpisode = true
        pauses += 1
        return (pause, starts)
    }

    /// An accept succeeded: the next pause, if any, is short again.
    mutating func accepted() {
        nextPause = Self.firstPause
    }

    /// The backlog is empty. Ends the episode: returns its number of pauses, or nil when there
    /// was none.
    mutating func caughtUp() -> Int? {
        guard inEpisode else { return nil }
        let n = pauses
        self = AcceptBackoff()
        return n
    }
}
