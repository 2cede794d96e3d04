/// Why we failed a connection: the peer violated RFC 6455 or a configured limit.
///
/// Each error carries the close code to send (§7.4.1): 1002 for protocol violations, 1007 for
/// invalid UTF-8, 1009 for size limits. Compare against the static members, e.g.
/// `error == .invalidUTF8` or `error == .invalidCloseCode(999)`.
public struct WebSocketProtocolError: Error, Equatable, Sendable, CustomStringConvertible {
    private enum Reason: Equatable, Sendable {
        case reservedOpcode(UInt8)
        case rsvBitsSet
        case unmaskedClientFrame
        case maskedServerFrame
        case controlFrameTooLong
        case fragmentedControlFrame
        case unexpectedContinuation
        case expectedContinuation
        case lengthMSBSet
        case frameTooLarge
        case messageTooLarge
        case invalidUTF8
        case invalidClosePayload
        case invalidCloseCode(UInt16)
        case invalidCloseReasonUTF8
        case invalidCompressedData
        case decompressionRatioExceeded
    }

    private let reason: Reason

    private init(_ reason: Reason) { self.reason = reason }

    /// §5.2: opcodes 0x3–0x7 and 0xB–0xF are reserved. 1002.
    public static func reservedOpcode(_ opcode: WebSocketOpcode) -> Self { Self(.reservedOpcode(opcode.rawValue)) }
    /// §5.2: an RSV bit was set that no negotiated extension defines (with permessage-deflate,
    /// RSV1 is allowed on the first frame of a data message only, RFC 7692 §6). 1002.
    public static let rsvBitsSet = Self(.rsvBitsSet)
    /// §5.1: a server received an unmasked frame. 1002.
    public static let unmaskedClientFrame = Self(.unmaskedClientFrame)
    /// §5.1: a client received a masked frame. 1002.
    public static let maskedServerFrame = Self(.maskedServerFrame)
    /// §5.5: a control frame payload longer than 125 bytes. 1002.
    public static let controlFrameTooLong = Self(.controlFrameTooLong)
    /// §5.5: a control frame without FIN. 1002.
    public static let fragmentedControlFrame = Self(.fragmentedControlFrame)
    /// §5.4: a continuation frame with no fragmented message in progress. 1002.
    public static let unexpectedContinuation = Self(.unexpectedContinuation)
    /// §5.4: a text or binary frame while a fragmented message is in progress. 1002.
    public static let expectedContinuation = Self(.expectedContinuation)
    /// §5.2: a 64-bit payload length with its most significant bit set. 1002.
    public static let lengthMSBSet = Self(.lengthMSBSet)
    /// A frame payload above ``WebSocketProtocolLimits/maxFrameSize``. 1009.
    public static let frameTooLarge = Self(.frameTooLarge)
    /// A message above ``WebSocketProtocolLimits/maxMessageSize``. 1009.
    public static let messageTooLarge = Self(.messageTooLarge)
    /// §8.1: a text message that is not valid UTF-8. 1007.
    public static let invalidUTF8 = Self(.invalidUTF8)
    /// §5.5.1: a close frame with a 1-byte payload (a code needs 2). 1002.
    public static let invalidClosePayload = Self(.invalidClosePayload)
    /// §7.4: a close code that must not appear on the wire. 1002.
    public static func invalidCloseCode(_ code: UInt16) -> Self { Self(.invalidCloseCode(code)) }
    /// §5.5.1: a close reason that is not valid UTF-8. 1007.
    public static let invalidCloseReasonUTF8 = Self(.invalidCloseReasonUTF8)

    /// RFC 7692 §6.1: a compressed message that does not inflate (corrupt deflate data). 1007.
    public static let invalidCompressedData = Self(.invalidCompressedData)
    /// A compressed message inflating beyond
    /// ``PerMessageDeflateConfiguration/maxDecompressionRatio`` (a likely decompression bomb).
    /// 1009.
    public static let decompressionRatioExceeded = Self(.decompressionRatioExceeded)

    /// The close code to send for this error: 1002, 1007 or 1009.
    public var closeCode: WebSocketCloseCode {
        switch reason {
        case .invalidUTF8, .invalidCloseReasonUTF8, .invalidCompressedData: return .invalidPayloadData
        case .frameTooLarge, .messageTooLarge, .decompressionRatioExceeded: return .messageTooBig
        default: return .protocolError
        }
    }

    /// A short ASCII explanation, also used as the reason of the close frame we send.
    public var description: String {
        switch reason {
        case .reservedOpcode(let opcode): return "reserved opcode 0x\(String(opcode, radix: 16))"
        case .rsvBitsSet: return "RSV bits set that no negotiated extension defines"
        case .unmaskedClientFrame: return "client frame not masked"
        case .maskedServerFrame: return "server frame masked"
        case .controlFrameTooLong: return "control frame payload over 125 bytes"
        case .fragmentedControlFrame: return "fragmented control frame"
        case .unexpectedContinuation: return "continuation frame without a message in progress"
        case .expectedContinuation: return "new data frame while a fragmented message is in progress"
        case .lengthMSBSet: return "64-bit payload length with the most significant bit set"
        case .frameTooLarge: return "frame too large"
        case .messageTooLarge: return "message too large"
        case .invalidUTF8: return "invalid UTF-8 in text message"
        case .invalidClosePayload: return "close frame payload of 1 byte"
        case .invalidCloseCode(let code): return "invalid close code \(code)"
        case .invalidCloseReasonUTF8: return "invalid UTF-8 in close reason"
        case .invalidCompressedData: return "compressed message does not inflate"
        case .decompressionRatioExceeded: return "compressed message inflates too far"
        }
    }
}
