import Testing
import Switchboard
import SwitchboardCore

/// `bearerToken` trims optional whitespace (SP/HTAB, `HTTPSyntax.trimmingOWS`) around the token.
@Suite struct BearerTokenTests {
    @Test func bearerTokenIsTrimmedOfOptionalWhitespace() {
        func request(_ authorization: String) -> WebSocketUpgradeRequest {
            WebSocketUpgradeRequest(head: HTTPRequestHead(method: "GET", target: "/",
                                                          headers: ["Authorization": authorization]),
                                    key: "dGhlIHNhbXBsZSBub25jZQ==")
        }
        #expect(request("Bearer abc").bearerToken == "abc")
        #expect(request("bearer \t abc\t ").bearerToken == "abc")
        #expect(request("Bearer ").bearerToken == nil)
    }
}
