import Testing
@testable import Switchboard
import SwitchboardCore

/// The per-connection catch-up state, decision by decision: a catch-up that begins while an
/// earlier one's filter is still waiting for a late publication keeps that filter.
@Suite struct ConnectionTopicCatchUpsTests {
    static func publication(_ id: Int, topic: String = "t") -> TopicPublication {
        TopicPublication(topic: topic, opcode: .text, payload: Array("m \(id)".utf8), compress: false)
    }

    static func id(_ payload: [UInt8]) -> Int? { Int(String(decoding: payload, as: UTF8.self).dropFirst(2)) }

    /// Skips `id` until a newer one arrives (a chat sender's late echo of an unconfirmed message).
    static func skipping(_ id: Int) -> @Sendable ([UInt8]) -> TopicCatchUpDecision {
        { payload in
            guard let other = Self.id(payload) else { return .deliver }
            if other == id { return .skip }
            return other > id ? .deliverAndStopFiltering : .deliver
        }
    }

    static func decisions(_ catchUps: ConnectionTopicCatchUps, _ ids: [Int]) -> [String] {
        ids.map { id in
            switch catchUps.step(for: publication(id), limit: 1 << 20) {
            case nil: "none"
            case .deliver?: "deliver"
            case .skip?: "skip"
            case .held?: "held"
            }
        }
    }

    @Test func aLaterCatchUpKeepsAnEarlierFilterUntilItStops() {
        let catchUps = ConnectionTopicCatchUps()
        let first = catchUps.begin("t")
        #expect(catchUps.release("t", generation: first, filter: Self.skipping(7))?.isEmpty == true)
        // A second catch-up of the same topic (the sender's next post, a pub/sub recovery)
        // before the late publication 7 arrives: held while it holds, then the earlier filter
        // still applies to what it held and to what comes after.
        let second = catchUps.begin("t")
        #expect(Self.decisions(catchUps, [5]) == ["held"])
        let held = catchUps.release("t", generation: second, filter: nil)
        #expect(held?.map { Self.id($0.payload) } == [5])
        #expect(Self.decisions(catchUps, [7, 6, 8, 7]) == ["skip", "deliver", "deliver", "none"])
        #expect(catchUps.entries.isEmpty)
    }

    /// A catch-up begun while an earlier one still holds (a chat's pub/sub recovery during a
    /// sender's confirmation wait) takes over what the earlier one held: nothing is dropped.
    /// Here the later one finishes first, with nothing to send (`cancel`): everything held goes.
    @Test func aCatchUpBegunWhileAnotherHoldsTakesOverWhatItHeld() {
        let catchUps = ConnectionTopicCatchUps()
        let first = catchUps.begin("t")
        #expect(Self.decisions(catchUps, [5]) == ["held"])
        let second = catchUps.begin("t")
        #expect(Self.decisions(catchUps, [6]) == ["held"])
        #expect(catchUps.release("t", generation: second, filter: nil)?.map { Self.id($0.payload) } == [5, 6])
        // The earlier one, superseded, has nothing left to send.
        #expect(catchUps.release("t", generation: first, filter: nil)?.isEmpty != false)
        #expect(catchUps.entries.isEmpty)
    }

    /// The earlier catch-up finishes while the later one still holds: what it held stays held
    /// (sent by the later one's finish), and its filter joins the chain, so it applies to them.
    @Test func anEarlierCatchUpFinishingWhileALaterOneHoldsLeavesItsFilter() {
        let catchUps = ConnectionTopicCatchUps()
        let first = catchUps.begin("t")
        #expect(Self.decisions(catchUps, [4, 5]) == ["held", "held"])
        let second = catchUps.begin("t")
        #expect(catchUps.release("t", generation: first, filter: Self.skipping(4))?.isEmpty != false)
        #expect(Self.decisions(catchUps, [6]) == ["held"])
        let held = catchUps.release("t", generation: second, filter: nil) ?? []
        #expect(held.filter { catchUps.passes("t", $0.payload) }.map { Self.id($0.payload) } == [5, 6])
        #expect(catchUps.entries.isEmpty, "the first filter stopped at 5")
    }

    /// Held bytes carried over still count against the limit.
    @Test func heldBytesCarryOverToTheLaterCatchUp() {
        let catchUps = ConnectionTopicCatchUps()
        _ = catchUps.begin("t")
        let size = Self.publication(1).payload.count
        _ = catchUps.step(for: Self.publication(1), limit: 1 << 20)
        _ = catchUps.begin("t")
        #expect(catchUps.step(for: Self.publication(2), limit: 2 * size) == .held(overLimit: false))
        #expect(catchUps.step(for: Self.publication(3), limit: 2 * size) == .held(overLimit: true))
    }

    @Test func bothFiltersSeeEveryPublicationAndEachStopsOnItsOwn() {
        let catchUps = ConnectionTopicCatchUps()
        let first = catchUps.begin("t")
        _ = catchUps.release("t", generation: first, filter: Self.skipping(9))
        let second = catchUps.begin("t")
        _ = catchUps.release("t", generation: second, filter: Self.skipping(3))
        // 3 skipped by the second; 4 stops the second; 9 skipped by the first; 10 stops it.
        #expect(Self.decisions(catchUps, [3, 4, 3, 9, 10, 9]) == ["skip", "deliver", "deliver", "skip", "deliver", "none"])
    }

    @Test func filtersWaitingForeverAreBounded() {
        let catchUps = ConnectionTopicCatchUps()
        for id in 0..<100 {
            let generation = catchUps.begin("t")
            _ = catchUps.release("t", generation: generation, filter: Self.skipping(1000 - id))
        }
        #expect((catchUps.entries["t"]?.filters.count ?? 0) == ConnectionTopicCatchUps.maximumFilters)
        // The newest filters are kept.
        #expect(Self.decisions(catchUps, [901, 1000]) == ["skip", "deliver"])
    }

    @Test func anotherTopicIsUntouched() {
        let catchUps = ConnectionTopicCatchUps()
        let first = catchUps.begin("t")
        _ = catchUps.release("t", generation: first, filter: Self.skipping(7))
        #expect(catchUps.step(for: Self.publication(7, topic: "u"), limit: 1 << 20) == nil)
    }
}
