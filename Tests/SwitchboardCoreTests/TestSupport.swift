import Testing
@testable import SwitchboardCore

/// The masking key of the RFC 6455 §5.7 examples.
let rfcKey = WebSocketMaskingKey(0x37, 0xFA, 0x21, 0x3D)

/// A generator returning a fixed sequence, cycled. By default every key it yields is `rfcKey`.
struct TestRNG: RandomNumberGenerator {
    private let values: [UInt64]
    private var index = 0

    init(_ values: [UInt64] = [0x3D21_FA37]) { self.values = values }

    mutating func next() -> UInt64 {
        let value = values[index % values.count]
        index += 1
        return value
    }
}

/// SplitMix64: a tiny seeded deterministic generator for property tests.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Bytes from hex digits, ignoring spaces: `hex("81 05 48")`.
func hex(_ string: String) -> [UInt8] {
    let digits = Array(string.unicodeScalars.filter { $0 != " " && $0 != "\n" })
    var bytes: [UInt8] = []
    var index = 0
    while index + 1 < digits.count {
        if let byte = UInt8(String(digits[index]) + String(digits[index + 1]), radix: 16) { bytes.append(byte) }
        index += 2
    }
    return bytes
}

/// Feeds `chunks` in order to `machine` and collects every action. Records an issue if
/// `nextAction` returns nil before consuming a whole chunk.
func collectActions(
    _ machine: inout WebSocketProtocol, chunks: [[UInt8]], rng: inout TestRNG,
    sourceLocation: SourceLocation = #_sourceLocation
) -> [WebSocketProtocolAction] {
    var actions: [WebSocketProtocolAction] = []
    for chunk in chunks {
        chunk.withUnsafeBytes { raw in
            var offset = 0
            while let action = machine.nextAction(in: raw, offset: &offset, using: &rng) {
                actions.append(action)
                if actions.count > 10_000 {
                    Issue.record("runaway action loop", sourceLocation: sourceLocation)
                    return
                }
            }
            #expect(offset == raw.count, "nil returned before all input was consumed", sourceLocation: sourceLocation)
        }
    }
    return actions
}

/// The actions a fresh machine produces for `chunks`.
func actions(
    _ role: WebSocketRole, limits: WebSocketProtocolLimits = .default, chunks: [[UInt8]],
    sourceLocation: SourceLocation = #_sourceLocation
) -> [WebSocketProtocolAction] {
    var machine = WebSocketProtocol(role: role, limits: limits)
    var rng = TestRNG()
    return collectActions(&machine, chunks: chunks, rng: &rng, sourceLocation: sourceLocation)
}

/// Feeds `bytes` whole, split in two at every point, and one byte at a time; expects identical
/// actions every time and returns them.
///
/// `splitStride` > 1 tests every split point within 64 bytes of either end but only every
/// `splitStride`-th one in between: for the 64 KiB vector, comparing 65,000 results of 64 KiB
/// each takes minutes in a debug build, and the middle of a long payload exercises nothing the
/// sampled points do not.
func actionsAtEverySplit(
    _ role: WebSocketRole, limits: WebSocketProtocolLimits = .default, _ bytes: [UInt8], splitStride: Int = 1,
    sourceLocation: SourceLocation = #_sourceLocation
) -> [WebSocketProtocolAction] {
    let whole = actions(role, limits: limits, chunks: [bytes], sourceLocation: sourceLocation)
    for split in 0...bytes.count where split < 64 || bytes.count - split < 64 || split % splitStride == 0 {
        let parts = [Array(bytes[..<split]), Array(bytes[split...])]
        let result = actions(role, limits: limits, chunks: parts, sourceLocation: sourceLocation)
        if result != whole {
            Issue.record("split at \(split) differs: \(result)", sourceLocation: sourceLocation)
            break
        }
    }
    let byteByByte = actions(role, limits: limits, chunks: bytes.map { [$0] }, sourceLocation: sourceLocation)
    #expect(byteByByte == whole, "byte-by-byte feeding differs", sourceLocation: sourceLocation)
    return whole
}

/// A frame as a peer in `role`'s opposite would send it to `receiver`: masked with `rfcKey`
/// when the receiver is a server.
func peerFrame(to receiver: WebSocketRole, _ opcode: WebSocketOpcode, fin: Bool = true, _ payload: [UInt8]) -> [UInt8] {
    WebSocketFrameSerializer.frame(opcode: opcode, fin: fin, payload: payload, maskingKey: receiver == .server ? rfcKey : nil)
}

/// A frame the machine in `role` writes itself (masked with `rfcKey` from `TestRNG` as a client).
func ownFrame(_ role: WebSocketRole, _ opcode: WebSocketOpcode, _ payload: [UInt8]) -> [UInt8] {
    WebSocketFrameSerializer.frame(opcode: opcode, payload: payload, maskingKey: role == .client ? rfcKey : nil)
}

/// What a machine in `role` emits when failing the connection while open with `error`.
func failure(_ role: WebSocketRole, _ error: WebSocketProtocolError) -> [WebSocketProtocolAction] {
    [.failed(WebSocketCloseStatus(code: error.closeCode, reason: error.description, error: error))]
}

/// The close frame a machine in `role` writes after failing with `error`.
func failureCloseFrame(_ role: WebSocketRole, _ error: WebSocketProtocolError) -> [UInt8] {
    ownFrame(role, .close, WebSocketFrameSerializer.closePayload(code: error.closeCode, reason: error.description))
}

/// Feeds `bytes` to a fresh machine, then writes the close: the bytes of the reply (expects the
/// machine to be in `.closeReceived` and the handshake to complete).
func closeReply(_ role: WebSocketRole, after bytes: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) throws -> [UInt8] {
    var machine = WebSocketProtocol(role: role)
    var rng = TestRNG()
    _ = collectActions(&machine, chunks: [bytes], rng: &rng, sourceLocation: sourceLocation)
    #expect(machine.state == .closeReceived, sourceLocation: sourceLocation)
    var out: [UInt8] = []
    let progress = try machine.writeClose(code: .normalClosure, reason: "", into: &out, using: &rng)
    guard case .complete = progress else {
        Issue.record("expected the handshake to complete, got \(progress)", sourceLocation: sourceLocation)
        return out
    }
    #expect(machine.state == .closed, sourceLocation: sourceLocation)
    return out
}

extension WebSocketProtocolAction {
    /// The error of a `.failed` or `.closeTransport`, if any.
    var failureError: WebSocketProtocolError? {
        switch self {
        case .failed(let status), .closeTransport(let status): return status.error
        default: return nil
        }
    }
}
