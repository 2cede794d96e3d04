import Testing
@testable import SwitchboardCore

@Suite("RFC 6455 §7.4.1 close codes for protocol failures")
struct WebSocketProtocolErrorTests {
    static let protocolErrors: [WebSocketProtocolError] = [
        .reservedOpcode(WebSocketOpcode(rawValue: 3)!), .rsvBitsSet, .unmaskedClientFrame, .maskedServerFrame,
        .controlFrameTooLong, .fragmentedControlFrame, .unexpectedContinuation, .expectedContinuation,
        .lengthMSBSet, .invalidClosePayload, .invalidCloseCode(999),
    ]

    @Test func protocolViolationsMapTo1002() {
        for error in Self.protocolErrors { #expect(error.closeCode == .protocolError, "\(error)") }
    }

    @Test func invalidUTF8MapsTo1007() {
        #expect(WebSocketProtocolError.invalidUTF8.closeCode == .invalidPayloadData)
        #expect(WebSocketProtocolError.invalidCloseReasonUTF8.closeCode == .invalidPayloadData)
    }

    @Test func sizeLimitsMapTo1009() {
        #expect(WebSocketProtocolError.frameTooLarge.closeCode == .messageTooBig)
        #expect(WebSocketProtocolError.messageTooLarge.closeCode == .messageTooBig)
    }

    @Test func descriptionsAreDistinctShortAndFitACloseFrame() {
        let all = Self.protocolErrors + [.invalidUTF8, .invalidCloseReasonUTF8, .frameTooLarge, .messageTooLarge]
        #expect(Set(all.map(\.description)).count == all.count)
        for error in all { #expect(error.description.utf8.count <= WebSocketFrameSerializer.maxCloseReasonLength) }
        #expect(WebSocketProtocolError.reservedOpcode(WebSocketOpcode(rawValue: 0xB)!).description == "reserved opcode 0xb")
        #expect(WebSocketProtocolError.invalidCloseCode(5000).description == "invalid close code 5000")
    }

    @Test func associatedValuesDistinguishErrors() {
        #expect(WebSocketProtocolError.invalidCloseCode(999) != .invalidCloseCode(1005))
        #expect(WebSocketProtocolError.reservedOpcode(WebSocketOpcode(rawValue: 3)!) != .reservedOpcode(WebSocketOpcode(rawValue: 4)!))
    }
}
