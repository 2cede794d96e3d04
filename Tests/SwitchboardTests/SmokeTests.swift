import Testing
@testable import Switchboard
import SwitchboardCore

@Suite struct SmokeTests {
    @Test func coreIsReexported() { #expect(WebSocketOpcode.text.rawValue == 1) }
}
