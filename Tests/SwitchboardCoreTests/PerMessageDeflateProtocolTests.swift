import Testing
@testable import SwitchboardCore

/// A machine with permessage-deflate negotiated as `parameters`.
func deflateMachine(_ role: WebSocketRole, _ parameters: PerMessageDeflateParameters = PerMessageDeflateParameters(),
                    configuration: PerMessageDeflateConfiguration = .contextTakeover,
                    limits: WebSocketProtocolLimits = .default,
                    shared: PerMessageDeflateSharedStreams = PerMessageDeflateSharedStreams()) -> WebSocketProtocol {
    WebSocketProtocol(role: role, limits: limits,
                      deflate: PerMessageDeflateCodec(parameters: parameters, configuration: configuration, role: role, shared: shared))
}

/// Feeds `chunks` to `machine`, returning its actions.
func feed(_ machine: inout WebSocketProtocol, _ chunks: [[UInt8]]) -> [WebSocketProtocolAction] {
    var rng = TestRNG()
    return collectActions(&machine, chunks: chunks, rng: &rng)
}

/// JSON-like text of about `size` bytes.
func jsonText(_ size: Int, seed: Int = 0) -> [UInt8] {
    var text = "["
    var i = seed
    while text.utf8.count < size {
        text += #"{"user":"user\#(i % 17)","room":"lobby","text":"message number \#(i) says hello","ts":\#(1_700_000_000 + i * 37)},"#
        i += 1
    }
    return Array(text.utf8.prefix(size))
}

/// RFC 7692 §6 and §7.2: compressed messages on the wire.
@Suite("RFC 7692 §7.2 compression")
struct PerMessageDeflateProtocolTests {
    /// §7.2.3.1: "Hello" compressed, as one frame and as two fragments.
    @Test func rfcExampleHelloInOneFrameAndFragmented() {
        var machine = deflateMachine(.client)
        #expect(feed(&machine, [hex("c1 07 f2 48 cd c9 c9 07 00")]) == [.message(.text(Array("Hello".utf8)))])
        var fragmented = deflateMachine(.client)
        #expect(feed(&fragmented, [hex("41 03 f2 48 cd 80 04 c9 c9 07 00")]) == [.message(.text(Array("Hello".utf8)))])
    }

    /// §7.2.3.2: the second "Hello" refers back to the first (context takeover).
    @Test func rfcExampleContextTakeover() {
        var machine = deflateMachine(.client)
        let hello = WebSocketProtocolAction.message(.text(Array("Hello".utf8)))
        #expect(feed(&machine, [hex("c1 07 f2 48 cd c9 c9 07 00"), hex("c1 05 f2 00 11 00 00")]) == [hello, hello])
    }

    /// §7.2.3.3 (no compression, a stored block) and §7.2.3.4 (BFINAL set).
    @Test func rfcExamplesStoredBlockAndFinalBlock() {
        let hello = WebSocketProtocolAction.message(.text(Array("Hello".utf8)))
        var stored = deflateMachine(.client)
        #expect(feed(&stored, [hex("c1 0b 00 05 00 fa ff 48 65 6c 6c 6f 00")]) == [hello])
        var final = deflateMachine(.client)
        #expect(feed(&final, [hex("c1 08 f3 48 cd c9 c9 07 00 00"), hex("c1 07 f2 48 cd c9 c9 07 00")]) == [hello, hello])
    }

    @Test func compressedFramesSurviveEverySplitPoint() {
        var writer = deflateMachine(.server)
        var rng = TestRNG()
        var wire: [UInt8] = []
        let first = jsonText(600), second = jsonText(700, seed: 3)
        #expect(throws: Never.self) {
            try writer.writeMessage(.text, payload: first, into: &wire, using: &rng)
            try writer.writeMessage(.binary, payload: second, into: &wire, using: &rng)
        }
        #expect(wire[0] == 0xC1, "RSV1 and FIN set on a compressed text frame")
        #expect(wire.count < (first.count + second.count) / 2, "JSON compresses")
        let expected: [WebSocketProtocolAction] = [.message(.text(first)), .message(.binary(second))]
        for split in stride(from: 0, through: wire.count, by: 7) {
            var reader = deflateMachine(.client)
            #expect(feed(&reader, [Array(wire[..<split]), Array(wire[split...])]) == expected, "split at \(split)")
        }
        var oneByOne = deflateMachine(.client)
        #expect(feed(&oneByOne, wire.map { [$0] }) == expected)
    }

    @Test func clientFramesAreMaskedAfterCompression() throws {
        var client = deflateMachine(.client)
        var server = deflateMachine(.server)
        var rng = SplitMix64(seed: 7)
        var wire: [UInt8] = []
        let payload = jsonText(1000)
        try client.writeMessage(.text, payload: payload, into: &wire, using: &rng)
        #expect(wire[0] == 0xC1 && wire[1] & 0x80 != 0)
        #expect(feed(&server, [wire]) == [.message(.text(payload))])
    }

    @Test func smallMessagesAndOptedOutMessagesGoUncompressed() throws {
        var server = deflateMachine(.server)
        var rng = TestRNG()
        var small: [UInt8] = []
        try server.writeMessage(.text, payload: Array("short".utf8), into: &small, using: &rng)
        #expect(small == hex("81 05") + Array("short".utf8))
        var optedOut: [UInt8] = []
        let big = jsonText(1000)
        try server.writeMessage(.text, payload: big, into: &optedOut, using: &rng, compress: false)
        #expect(optedOut[0] == 0x81 && optedOut.count == big.count + 4)
        #expect(!server.compresses(payloadCount: big.count, compress: false))
        #expect(server.compresses(payloadCount: big.count))
        #expect(!server.compresses(payloadCount: 255))
    }

    /// RSV1 is per message (§6): an uncompressed message between compressed ones is accepted,
    /// and the context carries over it.
    @Test func uncompressedMessageBetweenCompressedOnes() throws {
        var server = deflateMachine(.server)
        var client = deflateMachine(.client)
        var rng = TestRNG()
        var wire: [UInt8] = []
        let a = jsonText(800), b = Array("plain".utf8), c = jsonText(800, seed: 1)
        try server.writeMessage(.text, payload: a, into: &wire, using: &rng)
        try server.writeMessage(.text, payload: b, into: &wire, using: &rng)
        try server.writeMessage(.text, payload: c, into: &wire, using: &rng)
        #expect(feed(&client, [wire]) == [.message(.text(a)), .message(.text(b)), .message(.text(c))])
    }

    @Test(arguments: [
        ("c0 00 c1 00", "RSV1 on a continuation"),
        ("c9 00", "RSV1 on a ping"),
        ("a1 00", "RSV2 on a text frame"),
    ])
    func misplacedRSVBitsFail(_ frames: String, _ what: String) {
        // A first fragment without RSV1 so the continuation is legal framing.
        var machine = deflateMachine(.client)
        let bytes = frames.hasPrefix("c0") ? hex("01 00") + hex("c0 00") : hex(frames)
        #expect(feed(&machine, [bytes]).last?.failureError == .rsvBitsSet, "\(what)")
    }

    @Test func rsv1WithoutTheExtensionFails() {
        #expect(actions(.client, chunks: [hex("c1 07 f2 48 cd c9 c9 07 00")]) == failure(.client, .rsvBitsSet))
    }

    @Test func corruptDeflateDataFailsWith1007() {
        var machine = deflateMachine(.client)
        let result = feed(&machine, [hex("c1 04 ff ff ff ff")])
        #expect(result.last?.failureError == .invalidCompressedData)
        #expect(WebSocketProtocolError.invalidCompressedData.closeCode == .invalidPayloadData)
    }

    @Test func compressedTextIsValidatedAfterInflating() throws {
        var server = deflateMachine(.server)
        var rng = TestRNG()
        var wire: [UInt8] = []
        // Binary payload that is not UTF-8, re-labelled as text on the wire.
        try server.writeMessage(.binary, payload: [UInt8](repeating: 0xFF, count: 400), into: &wire, using: &rng)
        wire[0] = 0xC1
        var client = deflateMachine(.client)
        #expect(feed(&client, [wire]).last?.failureError == .invalidUTF8)
    }

    /// Connections without context takeover share one decompressor per thread: interleaved
    /// messages of different connections do not disturb each other.
    @Test func sharedStreamsServeInterleavedConnections() throws {
        let shared = PerMessageDeflateSharedStreams()
        let params = PerMessageDeflateParameters(serverNoContextTakeover: true, clientNoContextTakeover: true)
        var senders = (0..<3).map { _ in deflateMachine(.client, params, configuration: .default) }
        var receivers = (0..<3).map { _ in deflateMachine(.server, params, configuration: .default, shared: shared) }
        var rng = SplitMix64(seed: 1)
        for round in 0..<4 {
            for i in 0..<3 {
                var wire: [UInt8] = []
                let payload = jsonText(500 + 100 * i, seed: round * 3 + i)
                try senders[i].writeMessage(.text, payload: payload, into: &wire, using: &rng)
                let half = wire.count / 2
                // Half now, the other connections' messages, then the rest.
                #expect(feed(&receivers[i], [Array(wire[..<half]), Array(wire[half...])]) == [.message(.text(payload))])
            }
        }
        #expect(receivers.allSatisfy { $0.deflate?.holdsDedicatedStreams == false })
    }

    /// Without context takeover either way a connection keeps nothing of its own: connections
    /// of one thread with the same negotiation share one codec.
    @Test func codecsWithoutContextTakeoverAreSharedPerThread() {
        let shared = PerMessageDeflateSharedStreams()
        let none = PerMessageDeflateParameters(serverNoContextTakeover: true, clientNoContextTakeover: true)
        let a = shared.codec(parameters: none, configuration: .default, role: .server)
        let b = shared.codec(parameters: none, configuration: .default, role: .server)
        #expect(a === b && a.usesSharedStreamsOnly)
        let windowed = PerMessageDeflateParameters(serverNoContextTakeover: true, clientNoContextTakeover: true,
                                                   serverMaxWindowBits: 10)
        #expect(shared.codec(parameters: windowed, configuration: .default, role: .server) !== a)
        // The peer keeps its context: a decompressor of its own is needed, so no sharing.
        let takeover = PerMessageDeflateParameters()
        let c = shared.codec(parameters: takeover, configuration: .default, role: .server)
        let d = shared.codec(parameters: takeover, configuration: .default, role: .server)
        #expect(c !== d && !c.usesSharedStreamsOnly)
    }

    @Test func dedicatedStreamsAreMadeOnTheFirstCompressedMessage() throws {
        var server = deflateMachine(.server)
        #expect(server.deflate?.holdsDedicatedStreams == false)
        var rng = TestRNG()
        var wire: [UInt8] = []
        try server.writeMessage(.text, payload: Array("tiny".utf8), into: &wire, using: &rng)
        #expect(server.deflate?.holdsDedicatedStreams == false, "below the threshold nothing is compressed")
        try server.writeMessage(.text, payload: jsonText(400), into: &wire, using: &rng)
        #expect(server.deflate?.holdsDedicatedStreams == true)
    }

    /// An idle connection gives its dedicated compressor back; the next message starts from an
    /// empty window, which the peer's decompressor (keeping its own window) reads fine.
    @Test func idleCompressorIsReleasedAndCompressionCarriesOn() throws {
        var server = deflateMachine(.server)
        var client = deflateMachine(.client)
        var rng = TestRNG()
        var wire: [UInt8] = []
        let a = jsonText(900), b = jsonText(900, seed: 5), c = jsonText(900, seed: 9)
        try server.writeMessage(.text, payload: a, into: &wire, using: &rng)
        server.releaseRecycledStorageIfIdle()          // used since the last check: kept
        #expect(server.deflate?.holdsDedicatedCompressor == true)
        try server.writeMessage(.text, payload: b, into: &wire, using: &rng)
        server.releaseRecycledStorageIfIdle()
        #expect(server.deflate?.holdsDedicatedCompressor == true)
        server.releaseRecycledStorageIfIdle()          // a whole period idle: released
        #expect(server.deflate?.holdsDedicatedCompressor == false)
        try server.writeMessage(.text, payload: c, into: &wire, using: &rng)
        #expect(feed(&client, [wire]) == [.message(.text(a)), .message(.text(b)), .message(.text(c))])
    }

    /// The server compresses with no larger a window than the client allowed.
    @Test func negotiatedWindowIsRespected() throws {
        let params = PerMessageDeflateParameters(serverMaxWindowBits: 9)
        var server = deflateMachine(.server, params)
        var rng = TestRNG()
        var wire: [UInt8] = []
        // Repeats 1 KiB apart can only be found with a window of at least 10 bits.
        let block = jsonText(1024)
        try server.writeMessage(.binary, payload: block + block, into: &wire, using: &rng)
        let decompressor = try #require(DeflateDecompressor(windowBits: 9))
        let body = Array(wire[4...])  // 2-byte header + 16-bit length
        #expect(try body.withUnsafeBytes { try decompressor.decompress($0, limit: 1 << 20) } == block + block)
    }
}

/// Decompression bombs: the limits apply to the bytes inflated, as they are produced.
@Suite("RFC 7692 decompression limits")
struct DecompressionBombTests {
    /// A message of zeros compressed: about 1/1000 of its inflated size.
    private func zerosCompressed(_ count: Int) -> [UInt8] {
        let compressor = DeflateCompressor(level: 9, windowBits: 15, memoryLevel: 9)
        let zeros = [UInt8](repeating: 0, count: count)
        return zeros.withUnsafeBytes { compressor?.compress($0, reset: true) } ?? []
    }

    @Test func bombInOneFrameFailsWith1009() {
        let body = zerosCompressed(8 << 20)   // 8 MiB of zeros in a few KiB
        #expect(body.count < 16 << 10)
        let limits = WebSocketProtocolLimits(maxFrameSize: 1 << 20, maxMessageSize: 1 << 20)
        var machine = deflateMachine(.client, configuration: PerMessageDeflateConfiguration(), limits: limits)
        let frame = WebSocketFrameSerializer.frame(opcode: .binary, rsv: 0b100, payload: body, maskingKey: nil)
        let result = feed(&machine, [frame])
        #expect(result.last?.failureError == .messageTooLarge)
        #expect(result.last?.failureError?.closeCode == .messageTooBig)
    }

    @Test func bombSpreadOverManyFragmentsFailsWith1009() {
        let body = zerosCompressed(8 << 20)
        let limits = WebSocketProtocolLimits(maxFrameSize: 1 << 20, maxMessageSize: 1 << 20)
        var machine = deflateMachine(.server, configuration: PerMessageDeflateConfiguration(), limits: limits)
        var wire: [UInt8] = []
        var offset = 0
        var first = true
        while offset < body.count {
            let end = min(body.count, offset + 64)
            WebSocketFrameSerializer.writeFrame(opcode: first ? .binary : .continuation, fin: end == body.count,
                                                rsv: first ? 0b100 : 0, payload: Array(body[offset..<end]),
                                                maskingKey: rfcKey, into: &wire)
            first = false
            offset = end
        }
        #expect(feed(&machine, [wire]).last?.failureError == .messageTooLarge)
    }

    @Test func decompressorNeverProducesMoreThanTheLimitPlusNothing() throws {
        let body = zerosCompressed(4 << 20)
        let decompressor = try #require(DeflateDecompressor())
        #expect(throws: DeflateDecompressor.Failure.tooLarge) {
            try body.withUnsafeBytes { try decompressor.decompress($0, limit: 100_000) }
        }
        // Exactly at the limit is fine.
        let exact = zerosCompressed(100_000)
        decompressor.reset()
        #expect(try exact.withUnsafeBytes { try decompressor.decompress($0, limit: 100_000) }.count == 100_000)
    }

    @Test func ratioLimitStopsHighlyCompressedMessagesAboveTheThreshold() throws {
        let body = zerosCompressed(4 << 20)  // ratio about 1000:1
        var config = PerMessageDeflateConfiguration()
        var machine = deflateMachine(.client, configuration: config)
        let frame = WebSocketFrameSerializer.frame(opcode: .binary, rsv: 0b100, payload: body, maskingKey: nil)
        #expect(feed(&machine, [frame]).last?.failureError == .decompressionRatioExceeded)
        #expect(WebSocketProtocolError.decompressionRatioExceeded.closeCode == .messageTooBig)
        // Without the ratio limit the same message is delivered (it is within the size limit).
        config.maxDecompressionRatio = nil
        var lenient = deflateMachine(.client, configuration: config)
        #expect(feed(&lenient, [frame]) == [.message(.binary([UInt8](repeating: 0, count: 4 << 20)))])
    }

    @Test func roundTripOfRandomPayloadsAtEveryWindow() throws {
        var rng = SplitMix64(seed: 42)
        for bits in 9...15 {
            let compressor = try #require(DeflateCompressor(level: 6, windowBits: bits, memoryLevel: 8))
            let decompressor = try #require(DeflateDecompressor(windowBits: bits))
            for size in [0, 1, 100, 5000, 70_000] {
                let payload = (0..<size).map { _ in UInt8.random(in: 0...3, using: &rng) + 0x61 }
                let body = try #require(payload.withUnsafeBytes { compressor.compress($0, reset: false) })
                #expect(try body.withUnsafeBytes { try decompressor.decompress($0, limit: 1 << 20) } == payload)
            }
        }
    }
}
