import Testing
@testable import Switchboard
import SwitchboardCore

/// The one IPv6 bracket stripper, and its users.
@Suite struct HostWithoutBracketsTests {
    @Test func bracketsAreStrippedOnlyAroundAWholeLiteral() {
        #expect(SocketAddress.hostWithoutBrackets("[::1]") == "::1")
        #expect(SocketAddress.hostWithoutBrackets("[fe80::1%eth0]") == "fe80::1%eth0")
        #expect(SocketAddress.hostWithoutBrackets("example.com") == "example.com")
        #expect(SocketAddress.hostWithoutBrackets("::1") == "::1")
        #expect(SocketAddress.hostWithoutBrackets("[") == "[")
        #expect(SocketAddress.hostWithoutBrackets("]") == "]")
        #expect(SocketAddress.hostWithoutBrackets("[::1") == "[::1")
        #expect(SocketAddress.hostWithoutBrackets("[]") == "")
        #expect(TLSSession.normalizedHost("[::1]") == "::1")
        #expect(TLSSession.normalizedHost("[") == "[")
    }
}
