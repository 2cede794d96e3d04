import Testing
@testable import SwitchboardCore

@Suite("RFC 6455 §7.4 close codes")
struct WebSocketCloseCodeTests {
    @Test func wireCodesThatMustNeverAppearAreRejected() {
        for code: UInt16 in [0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535] {
            #expect(WebSocketCloseCode(validatingWireCode: code) == nil, "code \(code)")
        }
    }
    @Test func assignedAndApplicationCodesAreAccepted() {
        for code: UInt16 in [1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999, 4000, 4999] {
            #expect(WebSocketCloseCode(validatingWireCode: code)?.rawValue == code, "code \(code)")
        }
    }
    @Test func reservedCodesAreNotSendable() {
        #expect(!WebSocketCloseCode.noStatusReceived.isSendable)
        #expect(!WebSocketCloseCode.abnormalClosure.isSendable)
        #expect(!WebSocketCloseCode.tlsHandshakeFailure.isSendable)
        #expect(WebSocketCloseCode.goingAway.isSendable)
    }
    @Test func tokenExpiredIsTheSendableApplicationCode4001() {
        #expect(WebSocketCloseCode.tokenExpired.rawValue == 4001)
        #expect(WebSocketCloseCode.tokenExpired.isSendable)
        #expect(WebSocketCloseCode(validatingWireCode: 4001) == .tokenExpired)
        #expect(WebSocketCloseCode.tokenExpired.description == "4001 (token expired)")
    }
}
