@testable import SwitchboardRedis
import SwitchboardTestSupport
import Testing

/// The Redis Cluster backplane's publish lanes, step by step: one drainer per lane, each publish
/// sent once and in its slot's order, the bounds, eviction, and close. (Run L of stop 44 saw a
/// publish sent twice when finishing a publish and taking the next were two steps; the lanes now
/// do both in ``ClusterPublishLanes/finishHead(of:)``.)
struct ClusterPublishLanesTests {
    @Test func aPublishArrivingAfterTheLaneWasGivenUpStartsANewDrainerAndTheOldOneStops() {
        var lanes = ClusterPublishLanes<String>(maximumCount: 10, maximumBytes: 1000)
        #expect(lanes.admit("a", size: 1, slot: 7).admission == .startLane)
        #expect(lanes.head(of: 7) == "a")  // drainer 1 sends "a"
        #expect(lanes.admit("b", size: 1, slot: 7).admission == .queued)
        #expect(lanes.finishHead(of: 7) == "b")  // drainer 1 goes on with "b"
        #expect(lanes.finishHead(of: 7) == nil)  // and gives the empty lane up
        #expect(lanes.laneCount == 0)
        // The interleaving that sent a publish twice: a publish arriving right after the lane was
        // given up opens a new lane (a new drainer); the old drainer, having stopped, never takes it.
        #expect(lanes.admit("c", size: 1, slot: 7).admission == .startLane)
        #expect(lanes.head(of: 7) == "c")
        #expect(lanes.count == 1)
        #expect(lanes.finishHead(of: 7) == nil)
        #expect(lanes.count == 0 && lanes.bytes == 0)
    }

    @Test func lanesOfDifferentSlotsAreIndependent() {
        var lanes = ClusterPublishLanes<String>(maximumCount: 10, maximumBytes: 1000)
        #expect(lanes.admit("a1", size: 2, slot: 1).admission == .startLane)
        #expect(lanes.admit("b1", size: 2, slot: 2).admission == .startLane)
        #expect(lanes.admit("a2", size: 2, slot: 1).admission == .queued)
        #expect(lanes.laneCount == 2)
        #expect(lanes.finishHead(of: 2) == nil)
        #expect(lanes.head(of: 1) == "a1")
        #expect(lanes.finishHead(of: 1) == "a2")
        #expect(lanes.count == 1 && lanes.bytes == 2)
    }

    @Test func countAndBytesBoundWhatIsQueuedAndInFlight() {
        var lanes = ClusterPublishLanes<Int>(maximumCount: 3, maximumBytes: 100)
        #expect(lanes.admit(1, size: 10, slot: 1).admission == .startLane)
        #expect(lanes.admit(2, size: 10, slot: 1).admission == .queued)
        #expect(lanes.admit(3, size: 10, slot: 1).admission == .queued)
        // Full by count; the only lane is this slot's own: nothing to evict.
        #expect(lanes.admit(4, size: 10, slot: 1) == (.dropped(firstDrop: true), 0))
        #expect(lanes.admit(5, size: 10, slot: 1) == (.dropped(firstDrop: false), 0))  // logged once
        #expect(lanes.finishHead(of: 1) == 2)  // the in-flight head counts until finished
        #expect(lanes.admit(6, size: 81, slot: 1) == (.dropped(firstDrop: false), 0))  // 20 + 81 bytes
        #expect(lanes.admit(7, size: 80, slot: 1).admission == .queued)  // 100 bytes: fits
        #expect(lanes.count == 3 && lanes.bytes == 100)
        // Emptied: the next drop is logged again.
        #expect(lanes.finishHead(of: 1) == 3)
        #expect(lanes.finishHead(of: 1) == 7)
        #expect(lanes.finishHead(of: 1) == nil)
        #expect(lanes.admit(8, size: 101, slot: 1) == (.dropped(firstDrop: true), 0))
    }

    @Test func aFullQueueEvictsTheLongestLanesNewestPublishesButNeverItsHead() {
        var lanes = ClusterPublishLanes<String>(maximumCount: 4, maximumBytes: 1000)
        // Slot 1's shard is unreachable: its publishes pile up.
        for name in ["s1", "s2", "s3", "s4"] { _ = lanes.admit(name, size: 1, slot: 1) }
        // Another slot's publish gets a place: slot 1's newest gives way.
        #expect(lanes.admit("t1", size: 1, slot: 2) == (.startLane, 1))
        #expect(lanes.admit("t2", size: 1, slot: 2) == (.queued, 1))
        // Now lane 1 has 2 (s1, s2) and lane 2 has 2: lane 1 is not longer than lane 2 would be.
        #expect(lanes.admit("t3", size: 1, slot: 2) == (.dropped(firstDrop: true), 0))
        #expect(lanes.count == 4)
        #expect(lanes.finishHead(of: 1) == "s2")  // s3 and s4 are gone, s1 (in flight) stayed
        #expect(lanes.finishHead(of: 1) == nil)
        #expect(lanes.finishHead(of: 2) == "t2")
        #expect(lanes.finishHead(of: 2) == nil)
        #expect(lanes.count == 0 && lanes.bytes == 0)
    }

    @Test func aLaneHoldingOnlyItsHeadIsNeverEvicted() {
        var lanes = ClusterPublishLanes<String>(maximumCount: 2, maximumBytes: 1000)
        #expect(lanes.admit("a", size: 1, slot: 1).admission == .startLane)
        #expect(lanes.admit("b", size: 1, slot: 2).admission == .startLane)
        // Full, and each lane holds only the publish its drainer is sending.
        #expect(lanes.admit("c", size: 1, slot: 3) == (.dropped(firstDrop: true), 0))
        #expect(lanes.elements(of: 1) == ["a"] && lanes.elements(of: 2) == ["b"])
    }

    @Test func closingDropsEverythingAndStopsEveryDrainer() {
        var lanes = ClusterPublishLanes<String>(maximumCount: 10, maximumBytes: 1000)
        _ = lanes.admit("a", size: 5, slot: 1)
        _ = lanes.admit("b", size: 5, slot: 1)
        lanes.close()
        #expect(lanes.isClosed && lanes.count == 0 && lanes.bytes == 0 && lanes.laneCount == 0)
        #expect(lanes.finishHead(of: 1) == nil)
        #expect(lanes.head(of: 1) == nil)
        #expect(lanes.admit("c", size: 1, slot: 1) == (.dropped(firstDrop: false), 0))
        #expect(lanes.count == 0)
    }

    /// Random interleavings of publishes and drainer steps (seeded, so every run is the same),
    /// against a model: each admitted publish is sent exactly once unless evicted, in its slot's
    /// order; never two drainers on one slot; count and bytes match what is held and stay
    /// within the bounds.
    @Test(arguments: [1, 2, 3, 4, 5, 6, 7, 8] as [UInt64])
    func randomInterleavingsSendEachPublishOnceInOrderWithOneDrainerPerLane(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let maximumCount = 8, maximumBytes = 60
        var lanes = ClusterPublishLanes<Int>(maximumCount: maximumCount, maximumBytes: maximumBytes)
        var drainers: [Int: Int] = [:]  // slot → the publish its drainer is sending
        var held: [Int: [(id: Int, size: Int)]] = [:]  // the model: per slot, admitted and not finished
        var sent: [Int: [Int]] = [:]
        var evictedIDs = Set<Int>()
        var nextID = 0
        for _ in 0..<4000 {
            if drainers.isEmpty || random.next() % 3 != 0 {
                let slot = Int(random.next() % 10), size = Int(1 + random.next() % 12)
                let id = nextID
                nextID += 1
                let (admission, evicted) = lanes.admit(id, size: size, slot: slot)
                // Evictions: only other slots' newest publishes, never a lane's head (in flight).
                var evictedNow = 0
                for (other, publishes) in held where other != slot {
                    let kept = lanes.elements(of: other)
                    #expect(kept == publishes.prefix(kept.count).map(\.id), "slot \(other) lost other than its newest")
                    #expect(!kept.isEmpty, "slot \(other)'s head was evicted")
                    evictedIDs.formUnion(publishes.dropFirst(kept.count).map(\.id))
                    evictedNow += publishes.count - kept.count
                    held[other] = Array(publishes.prefix(kept.count))
                }
                #expect(evictedNow == evicted)
                switch admission {
                case .startLane:
                    #expect(drainers[slot] == nil, "a second drainer for slot \(slot)")
                    #expect(held[slot, default: []].isEmpty)
                    held[slot] = [(id, size)]
                    drainers[slot] = lanes.head(of: slot)
                    #expect(drainers[slot] == id)
                case .queued:
                    #expect(drainers[slot] != nil, "queued on a lane without a drainer")
                    held[slot, default: []].append((id, size))
                case .dropped:
                    break
                }
            } else {
                // A drainer finishes its publish and takes the next, or stops.
                let slot = drainers.keys.sorted()[Int(random.next() % UInt64(drainers.count))]
                guard let id = drainers[slot] else { continue }
                sent[slot, default: []].append(id)
                #expect(held[slot]?.first?.id == id, "the drainer sent something other than its lane's head")
                held[slot]?.removeFirst()
                let next = lanes.finishHead(of: slot)
                #expect(next == held[slot]?.first?.id)
                drainers[slot] = next
                if next == nil { held[slot] = nil }
            }
            let heldCount = held.values.reduce(0) { $0 + $1.count }
            let heldBytes = held.values.reduce(0) { $0 + $1.reduce(0) { $0 + $1.size } }
            #expect(lanes.count == heldCount && lanes.bytes == heldBytes)
            #expect(lanes.count <= maximumCount && lanes.bytes <= maximumBytes)
            #expect(lanes.laneCount == drainers.count)
        }
        for (_, ids) in sent {
            #expect(ids == ids.sorted(), "a slot's publishes out of order")
        }
        let all = sent.values.flatMap { $0 }
        #expect(Set(all).count == all.count, "a publish sent twice")
        #expect(Set(all).isDisjoint(with: evictedIDs))
    }
}
