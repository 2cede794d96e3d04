/// A frame opcode (RFC 6455 §5.2).
///
/// An open struct rather than an enum so that reserved values read off the wire stay
/// representable until the parser rejects them.
public struct WebSocketOpcode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt8

    /// Creates an opcode from its 4-bit wire value; values above 0xF are not opcodes.
    public init?(rawValue: UInt8) {
        guard rawValue <= 0xF else { return nil }
        self.rawValue = rawValue
    }

    @inlinable init(uncheckedRawValue: UInt8) { self.rawValue = uncheckedRawValue }

    public static let continuation = WebSocketOpcode(uncheckedRawValue: 0x0)
    public static let text = WebSocketOpcode(uncheckedRawValue: 0x1)
    public static let binary = WebSocketOpcode(uncheckedRawValue: 0x2)
    public static let close = WebSocketOpcode(uncheckedRawValue: 0x8)
    public static let ping = WebSocketOpcode(uncheckedRawValue: 0x9)
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
