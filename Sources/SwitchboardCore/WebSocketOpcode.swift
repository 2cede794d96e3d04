/// A frame opcode (RFC 6455 §5.2).
///
/// An open struct rather than an enum so that reserved values read off the wire stay
/// representable until the parser rejects them.
public struct WebSocketOpcode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The 4-bit opcode as on the wire (0x0–0xF).
    public let rawValue: UInt8

    /// Creates an opcode from its 4-bit wire value; values above 0xF are not opcodes.
    public init?(rawValue: UInt8) {
        guard rawValue <= 0xF else { return nil }
        self.rawValue = rawValue
    }

    @inlinable init(uncheckedRawValue: UInt8) { self.rawValue = uncheckedRawValue }

    /// 0x0: a continuation frame of a fragmented message.
    public static let continuation = WebSocketOpcode(uncheckedRawValue: 0x0)
    /// 0x1: the first frame of a text message (UTF-8 payload).
    public static let text = WebSocketOpcode(uncheckedRawValue: 0x1)
    /// 0x2: the first frame of a binary message.
    public static let binary = WebSocketOpcode(uncheckedRawValue: 0x2)
    /// 0x8: a close frame (control; optional 2-byte code and UTF-8 reason).
    public static let close = WebSocketOpcode(uncheckedRawValue: 0x8)
    /// 0x9: a ping (control); the peer answers with a pong carrying the same payload.
    public static let ping = WebSocketOpcode(uncheckedRawValue: 0x9)
    /// 0xA: a pong (control): the answer to a ping, or an unsolicited heartbeat.
    public static let pong = WebSocketOpcode(uncheckedRawValue: 0xA)

    /// Control frames have the high bit of the opcode set (§5.5).
    @inlinable public var isControl: Bool { rawValue & 0x8 != 0 }

    /// Opcodes 0x3–0x7 and 0xB–0xF are reserved (§5.2) and must fail the connection.
    @inlinable public var isReserved: Bool {
        switch rawValue {
        case 0x0, 0x1, 0x2, 0x8, 0x9, 0xA: return false
        default: return true
        }
    }

    /// The opcode's name (`text`, `ping`, …), or `reserved(0x…)` for a reserved value.
    public var description: String {
        switch rawValue {
        case 0x0: return "continuation"
        case 0x1: return "text"
        case 0x2: return "binary"
        case 0x8: return "close"
        case 0x9: return "ping"
        case 0xA: return "pong"
        default: return "reserved(0x\(String(rawValue, radix: 16)))"
        }
    }
}
