import Testing
@testable import SwitchboardCore

@Suite("RFC 6455 §4 handshake errors")
struct WebSocketHandshakeErrorTests {
    @Test func serverRejectionsCarryTheResponseToSend() {
        let cases: [(WebSocketHandshakeError, Int)] = [
            (.badMethod, 405), (.badVersion, 400), (.missingUpgrade, 400), (.missingConnectionUpgrade, 400),
            (.missingHost, 400), (.unsupportedWebSocketVersion, 426), (.badKey, 400), (.badSubprotocol, 400),
        ]
        for (error, status) in cases {
            #expect(error.response?.status == status, "\(error)")
            #expect(error.status == nil)
        }
        #expect(WebSocketHandshakeError.unsupportedWebSocketVersion.response?.headers["Sec-WebSocket-Version"] == "13")
        #expect(WebSocketHandshakeError.badMethod.response?.headers["Allow"] == "GET")
        let body = WebSocketHandshakeError.badKey.response.map { String(decoding: $0.body, as: UTF8.self) }
        #expect(body == #"{"error":{"message":"Sec-WebSocket-Key must be base64 of 16 bytes","type":"invalid_request_error","code":"bad_key"}}"#)
    }

    @Test func clientSideErrorsHaveNoResponse() {
        for error in [WebSocketHandshakeError.invalidArgument, .rejected(status: 403), .badAccept, .unexpectedSubprotocol, .unexpectedExtension] {
            #expect(error.response == nil)
            #expect(!error.description.isEmpty)
        }
        #expect(WebSocketHandshakeError.rejected(status: 403).status == 403)
    }

    @Test func equalityComparesKindAndStatusButNotDetail() {
        #expect(WebSocketHandshakeError.argument("x") == .invalidArgument)
        #expect(WebSocketHandshakeError.argument("x").description == "invalid handshake argument: x")
        #expect(WebSocketHandshakeError.rejected(status: 403) == .rejected(status: 403))
        #expect(WebSocketHandshakeError.rejected(status: 403) != .rejected(status: 404))
        #expect(WebSocketHandshakeError.badKey != .badAccept)
    }
}
