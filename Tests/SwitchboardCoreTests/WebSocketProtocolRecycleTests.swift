import Testing
@testable import SwitchboardCore

/// `recycle(_:)`: a message's storage offered back for a later message.
@Suite("WebSocketProtocol storage reuse")
struct WebSocketProtocolRecycleTests {
    private func payload(_ count: Int, seed: UInt8) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31) &+ seed }
    }

    private func baseAddress(_ bytes: [UInt8]) -> UInt? {
        bytes.withUnsafeBufferPointer { $0.baseAddress.map { UInt(bitPattern: $0) } }
    }

    /// Receives one message (as a server, masked frames) and returns its payload.
    private func receive(_ machine: inout WebSocketProtocol, _ opcode: WebSocketOpcode, _ bytes: [UInt8],
                         sourceLocation: SourceLocation = #_sourceLocation) -> [UInt8]? {
        var rng = TestRNG()
        let got = collectActions(&machine, chunks: [peerFrame(to: .server, opcode, bytes)], rng: &rng,
                                 sourceLocation: sourceLocation)
        guard got.count == 1, case .message(let message) = got[0] else {
            Issue.record("expected one message, got \(got.count) actions", sourceLocation: sourceLocation)
            return nil
        }
        switch message {
        case .text(let b), .binary(let b): return b
        }
    }

    @Test func aReleasedMessageStorageCarriesTheNextMessage() throws {
        var machine = WebSocketProtocol(role: .server)
        var first = try #require(receive(&machine, .binary, payload(64 << 10, seed: 1)))
        let address = baseAddress(first)
        machine.recycle(first)
        first = []  // the only other reference is gone: the storage is the machine's to reuse
        // Had the machine not kept it, this allocation would now likely take that address.
        let blocker = [UInt8](repeating: 7, count: 64 << 10)
        let second = try #require(receive(&machine, .binary, payload(60 << 10, seed: 2)))
        #expect(second == payload(60 << 10, seed: 2))
        #expect(baseAddress(second) == address, "the offered storage was not reused")
        #expect(blocker.count == 64 << 10)
    }

    @Test func storageStillSharedByTheCallerIsNeverWritten() throws {
        var machine = WebSocketProtocol(role: .server)
        let first = try #require(receive(&machine, .binary, payload(64 << 10, seed: 1)))
        machine.recycle(first)
        // `first` is still held here: the next message must get its own storage.
        let second = try #require(receive(&machine, .text, Array(String(repeating: "é", count: 32 << 10).utf8)))
        #expect(first == payload(64 << 10, seed: 1), "the caller's message was overwritten")
        #expect(second == Array(String(repeating: "é", count: 32 << 10).utf8))
        #expect(baseAddress(second) != baseAddress(first))
    }

    @Test func aMuchSmallerMessageDoesNotTakeLargeStorage() throws {
        var machine = WebSocketProtocol(role: .server)
        var big = try #require(receive(&machine, .binary, payload(256 << 10, seed: 1)))
        let address = baseAddress(big)
        machine.recycle(big)
        big = []
        let small = try #require(receive(&machine, .binary, payload(10, seed: 3)))
        #expect(small == payload(10, seed: 3))
        #expect(small.capacity < 1024, "a 10-byte message holds \(small.capacity) bytes")
        // Still on offer for a message of its size.
        let large = try #require(receive(&machine, .binary, payload(200 << 10, seed: 4)))
        #expect(large == payload(200 << 10, seed: 4))
        #expect(baseAddress(large) == address)
    }

    @Test func discardedStorageIsReleasedAndFragmentedMessagesReuseStorage() throws {
        var machine = WebSocketProtocol(role: .server)
        var first = try #require(receive(&machine, .binary, payload(64 << 10, seed: 1)))
        let address = baseAddress(first)
        machine.recycle(first)
        machine.releaseRecycledStorageIfIdle()  // offered since the last check: kept
        machine.releaseRecycledStorageIfIdle()  // nothing offered since: released
        // The machine no longer shares the storage: writing to it does not copy it.
        first[0] ^= 0xFF
        #expect(baseAddress(first) == address, "discarded storage is still held")
        let second = try #require(receive(&machine, .binary, payload(64 << 10, seed: 2)))
        #expect(second == payload(64 << 10, seed: 2))

        // Fragmented messages reuse it too, and the content is the concatenation.
        machine.recycle(second)
        let whole = payload(48 << 10, seed: 5)
        var rng = TestRNG()
        let got = collectActions(&machine, chunks: [
            peerFrame(to: .server, .binary, fin: false, Array(whole[..<(16 << 10)])),
            peerFrame(to: .server, .continuation, fin: true, Array(whole[(16 << 10)...])),
        ], rng: &rng)
        #expect(got == [.message(.binary(whole))])
    }
}
