import Testing
@testable import Switchboard
import SwitchboardCore

/// The adapter's batching of commands (``CommandOutbox``): order, one wake-up per batch, bounds.
@Suite struct CommandOutboxTests {
    final class FakeConnection {}

    @Test func refusesWithoutAConnection() {
        var outbox = CommandOutbox<FakeConnection>()
        guard case .refused = outbox.offer("a\n") else { Issue.record("accepted without a connection"); return }
        #expect(outbox.takeBatch().isEmpty)
    }

    @Test func firstCommandWakesTheLoopAndLaterOnesJoinTheBatchInOrder() {
        let connection = FakeConnection()
        var outbox = CommandOutbox<FakeConnection>()
        outbox.connectionChanged(to: connection)
        guard case .queuedAndWake(let woken) = outbox.offer("a\n") else { Issue.record("no wake-up"); return }
        #expect(woken === connection)
        guard case .queued = outbox.offer("b\n"), case .queued = outbox.offer("c\n") else {
            Issue.record("a second wake-up while one is scheduled"); return
        }
        #expect(outbox.takeBatch() == ["a\n", "b\n", "c\n"])
        // Drained: the next command schedules a new job.
        guard case .queuedAndWake = outbox.offer("d\n") else { Issue.record("no wake-up after the drain"); return }
        #expect(outbox.takeBatch() == ["d\n"])
    }

    @Test func refusesAboveItsLimitUntilDrained() {
        var outbox = CommandOutbox<FakeConnection>()
        outbox.connectionChanged(to: FakeConnection())
        let line = String(repeating: "x", count: 1023) + "\n"
        var accepted = 0
        while true {
            if case .refused = outbox.offer(line) { break }
            accepted += 1
        }
        #expect(accepted == CommandOutbox<FakeConnection>.limit / 1024)
        #expect(outbox.takeBatch().count == accepted)
        guard case .queuedAndWake = outbox.offer(line) else { Issue.record("still refused after the drain"); return }
    }

    @Test func refusesWhileTheConnectionQueueIsFullAndAfterTheConnectionIsGone() {
        var outbox = CommandOutbox<FakeConnection>()
        outbox.connectionChanged(to: FakeConnection())
        outbox.drained(writable: false)
        guard case .refused = outbox.offer("a\n") else { Issue.record("accepted above the high-water mark"); return }
        outbox.drained(writable: true)
        guard case .queuedAndWake = outbox.offer("a\n") else { Issue.record("refused with room"); return }
        _ = outbox.takeBatch()
        outbox.connectionChanged(to: nil)
        guard case .refused = outbox.offer("b\n") else { Issue.record("accepted without a connection"); return }
    }

    @Test func aBatchWhoseConnectionClosedIsKeptInOrderForTheNextConnection() {
        var outbox = CommandOutbox<FakeConnection>()
        outbox.connectionChanged(to: FakeConnection())
        _ = outbox.offer("a\n")
        _ = outbox.offer("b\n")
        outbox.strand(outbox.takeBatch())                // the drain job found the connection closed
        _ = outbox.offer("c\n")
        outbox.strand(outbox.takeBatch())
        outbox.connectionChanged(to: nil)
        // Not lost with the connection: the adapter takes them, oldest first, exactly once.
        #expect(outbox.takeStranded() == ["a\n", "b\n", "c\n"])
        #expect(outbox.takeStranded().isEmpty)
    }
}
