import Testing
@testable import Switchboard

@Suite struct SmokeTests {
    @Test func coreIsReexported() { #expect(WebSocketOpcode.text.rawValue == 1) }
}
