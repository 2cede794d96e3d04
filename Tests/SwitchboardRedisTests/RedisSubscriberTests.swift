import Foundation
@testable import SwitchboardRedis
import SwitchboardTestSupport
import Testing

/// Each pub/sub confirmation answers its own request: a channel counts as subscribed only once
/// Redis answered the last SUBSCRIBE sent for it.
@Suite(.timeLimit(.minutes(2)))
struct RedisSubscriberTests {
    @Test func aQuickResubscribeIsConfirmedOnlyByTheReplyToItsOwnSubscribe() async throws {
        let redis = try ScriptedRESPServer()
        let up = TestLock<CheckedContinuation<Void, Never>?>(nil)
        let subscriber = try RedisSubscriber(url: RedisURL(redis.url), onStateChange: { state in
            if case .connected = state { up.withLock { $0?.resume(); $0 = nil } }
        }, onMessage: { _, _ in })
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            up.withLock { $0 = c }
            Task { try await redis.acceptClient() }
        }

        // A quick leave and re-join: subscribe → unsubscribe → subscribe, all sent before Redis
        // answered the first.
        subscriber.add("room")
        subscriber.unsubscribe("room")
        let thirdReplySent = TestLock(false)
        let returned = TestLock(false)
        let resubscribe = Task { () -> (confirmed: Bool, afterItsReply: Bool) in
            let confirmed = await subscriber.subscribe("room")
            returned.withLock { $0 = true }
            return (confirmed, thirdReplySent.withLock { $0 })
        }
        #expect(try await redis.readCommand() == ["SUBSCRIBE", "room"])
        #expect(try await redis.readCommand() == ["UNSUBSCRIBE", "room"])
        #expect(try await redis.readCommand() == ["SUBSCRIBE", "room"])

        // The replies to the first two; the third is held back. A subscriber that takes the
        // first reply for the third has returned within this wait (which only gives it the chance).
        try await redis.send(ScriptedRESPServer.confirmation("subscribe", "room", count: 1)
                             + ScriptedRESPServer.confirmation("unsubscribe", "room", count: 0))
        let chance = ContinuousClock.now + .seconds(1)
        while !returned.withLock({ $0 }), ContinuousClock.now < chance {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(!subscriber.isReady)
        thirdReplySent.withLock { $0 = true }
        try await redis.send(ScriptedRESPServer.confirmation("subscribe", "room", count: 1))

        let result = await resubscribe.value
        #expect(result.confirmed)
        #expect(result.afterItsReply, "subscribe returned before Redis answered the second SUBSCRIBE")
        #expect(subscriber.isReady)
        await subscriber.close()
    }
}
