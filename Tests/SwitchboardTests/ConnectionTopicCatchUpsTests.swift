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
