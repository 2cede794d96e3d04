import SwitchboardCore

/// One message as the Redis backplane carries it between processes: the bytes a
/// ``RedisTopicBackplane`` or a ``RedisTopicEmitter`` publishes to the channel
/// `<prefix>topic:<topic>`, and reads back. Pure: no I/O.
///
/// ```
/// byte 0      version, 1
/// byte 1      flags: bit 0 (1) binary message, bit 1 (2) may be compressed; bits 2–7 zero
/// bytes 2–17  the publisher's node id: 16 bytes, random per publisher; all zero = from no node
/// bytes 18…   the message's payload, as is (never compressed; UTF-8 for a text message)
/// ```
///
/// The "may be compressed" flag is the publisher's per-message choice (`compress:` of
/// `WebSocketServer.publish`): the receiving server may send the message with
/// permessage-deflate to subscribers that negotiated it. The payload in the envelope is never
/// deflated, so a publisher in another language needs no compression library.
///
/// A receiving backplane ignores (and counts in
/// ``RedisTopicBackplane/Statistics-swift.struct/malformed``) an envelope shorter than 18 bytes,
/// of another version, with a reserved flag bit set, or with a text payload that is not valid
/// UTF-8; it drops, silently, its own node's envelopes (it served them in-process already). An
/// envelope from the all-zero node is delivered by every process. `docs/redis-envelope.md`
/// describes the format for publishers in other languages, with a Python example.
public struct BackplaneEnvelope: Sendable, Equatable {
    /// The format's version, the first byte. Receivers ignore any other.
    public static let version: UInt8 = 1
    /// Bytes before the payload: version, flags and node id.
    public static let headerLength = 18
    /// Bytes of a node id.
    public static let nodeIDLength = 16
    /// The node id of a message from no process (16 zero bytes): every process delivers it,
    /// the publishing one included.
    public static let noNode = [UInt8](repeating: 0, count: nodeIDLength)

    /// Flag bit: a binary message (clear: a text message).
    static let binaryFlag: UInt8 = 1
    /// Flag bit: subscribers may receive the message compressed (permessage-deflate).
    static let compressFlag: UInt8 = 2

    /// The message (text or binary) and its payload.
    public var message: WebSocketMessage
    /// Whether the receiving servers may send it compressed (the payload here never is).
    public var compress: Bool
    /// The publisher's node id, ``nodeIDLength`` bytes (``noNode`` for none).
    public var node: [UInt8]

    /// An envelope of `message` from `node` (``nodeIDLength`` bytes; ``noNode`` by default).
    public init(message: WebSocketMessage, compress: Bool = true, node: [UInt8] = BackplaneEnvelope.noNode) {
        self.message = message
        self.compress = compress
        self.node = node
    }

    /// Whether it is from no process (the all-zero node id), delivered by every process.
    public var isFromNoNode: Bool { node.allSatisfy { $0 == 0 } }

    /// The bytes before the payload: version, flags, `node`. `node` must have
    /// ``nodeIDLength`` bytes (it is cut or zero-padded to that length otherwise).
    public static func header(binary: Bool, compress: Bool, node: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(headerLength)
        bytes.append(version)
        bytes.append((binary ? binaryFlag : 0) | (compress ? compressFlag : 0))
        bytes.append(contentsOf: node.prefix(nodeIDLength))
        if node.count < nodeIDLength { bytes.append(contentsOf: repeatElement(0, count: nodeIDLength - node.count)) }
        return bytes
    }

    /// The whole envelope: ``header(binary:compress:node:)`` then the payload.
    public func encoded() -> [UInt8] {
        let (binary, payload): (Bool, [UInt8]) = switch message {
        case .text(let b): (false, b)
        case .binary(let b): (true, b)
        }
        var bytes = Self.header(binary: binary, compress: compress, node: node)
        bytes.append(contentsOf: payload)
        return bytes
    }

    /// Reads an envelope; nil when it is malformed: shorter than ``headerLength``, another
    /// ``version``, a reserved flag bit (2–7) set, or a text payload that is not valid UTF-8.
    public init?(decoding bytes: [UInt8]) {
        guard bytes.count >= Self.headerLength, bytes[0] == Self.version else { return nil }
        let flags = bytes[1]
        guard flags & ~(Self.binaryFlag | Self.compressFlag) == 0 else { return nil }
        let payload = Array(bytes[Self.headerLength...])
        if flags & Self.binaryFlag == 0 {
            guard UTF8Validator.isValid(payload) else { return nil }
            message = .text(payload)
        } else {
            message = .binary(payload)
        }
        compress = flags & Self.compressFlag != 0
        node = Array(bytes[2..<Self.headerLength])
    }
}

/// Node ids of publishers (random: not part of the pure envelope).
enum BackplaneNode {
    /// A new random node id: 16 random bytes, never all zero (which means "from no process").
    static func random() -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        var id = (0..<BackplaneEnvelope.nodeIDLength).map { _ in UInt8.random(in: 0...255, using: &generator) }
        if id.allSatisfy({ $0 == 0 }) { id[0] = 1 }
        return id
    }

    /// `node` in lowercase hexadecimal (32 digits for a node id).
    static func hex(_ node: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(node.count * 2)
        for byte in node {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
