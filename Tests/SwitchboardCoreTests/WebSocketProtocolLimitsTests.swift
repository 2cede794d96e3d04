import Testing
@testable import SwitchboardCore

@Suite("RFC 6455 §10.4 limits configuration")
struct WebSocketProtocolLimitsTests {
    @Test func defaultsAre16MiB() {
        #expect(WebSocketProtocolLimits.default.maxFrameSize == 16 * 1024 * 1024)
        #expect(WebSocketProtocolLimits.default.maxMessageSize == 16 * 1024 * 1024)
        #expect(WebSocketProtocolLimits() == .default)
        #expect(WebSocketProtocolLimits(maxFrameSize: 1) != .default)
    }
}
