import Testing
@testable import Switchboard
import SwitchboardCore

/// Descriptions, mirrors and error messages of endpoints hide secret query values and header values.
@Suite struct EndpointDescriptionTests {
    static func renderings(_ e: WebSocketURLEndpoint) -> [String] {
        var dumped = ""
        dump(e, to: &dumped)
        return [e.description, e.debugDescription, "\(e)", String(reflecting: e), dumped, e.redactedURL,
                "\(Mirror(reflecting: e).children.map { "\($0.label ?? ""): \($0.value)" })"]
    }

    @Test func secretQueryValuesAreRedacted() throws {
        var e = try WebSocketURLEndpoint(url: "wss://api.example.com/v1/ws?session_id=sess-42&token=TOK-SECRET",
                                         headers: [(name: "Authorization", value: "Bearer HDR-SECRET")])
        e.queryItems = [(name: "api_key", value: "KEY-SECRET"), (name: "room", value: "lobby")]
        for text in Self.renderings(e) {
            #expect(!text.contains("SECRET"), "leak: \(text)")
        }
        #expect(e.description == "wss://api.example.com:443/v1/ws?session_id=sess-42&token=<redacted>"
                + "&api_key=<redacted>&room=lobby headers: [Authorization] (values redacted)")
        // The request line itself is untouched.
        #expect(e.requestTarget == "/v1/ws?session_id=sess-42&token=TOK-SECRET&api_key=KEY-SECRET&room=lobby")
    }

    @Test func ipv6HostsAreBracketedInDescriptions() throws {
        let e = try WebSocketURLEndpoint(url: "ws://[::1]:9000/p")
        #expect(e.host == "::1")
        #expect(e.description == "ws://[::1]:9000/p")
    }

    @Test func invalidURLErrorsDoNotEchoSecrets() {
        for url in ["ftp://h/p?token=TOK-SECRET", "ws:///p?password=PW-SECRET", "ws://bob:PW-SECRET@/p"] {
            do {
                _ = try WebSocketURLEndpoint(url: url)
                Issue.record("\(url) accepted")
            } catch {
                #expect(!"\(error)".contains("SECRET"), "leak: \(error)")
                #expect(!error.message.isEmpty)
            }
        }
    }
}
