import Testing
@testable import Switchboard
import SwitchboardCore

/// A URL that does not parse is quoted in its error with its password hidden, also when the
/// password holds an unencoded `/`, `?`, `#`, `@` or `:` (which ends the authority early for a
/// URL parser, so the text after it looked like a path and was shown).
@Suite struct MalformedURLRedactionTests {
    /// Pieces of the password, distinctive enough to be found if an error quoted one.
    static let pieces = ["Zq7", "Yw8", "Xv9", "Uu6"]

    @Test(arguments: [
        "http://bob:Zq7/Yw8@proxy.internal:8080",
        "http://bob:Zq7?Yw8@proxy.internal:8080",
        "http://bob:Zq7#Yw8@proxy.internal:8080",
        "http://bob:Zq7@Yw8:Xv9/Uu6@proxy.internal:8080",
        "bob:Zq7/Yw8@proxy.internal:8080",
        "http://bob:Zq7/Yw8@proxy.internal:8080/path?token=Uu6",
    ])
    func proxyURLErrorsNeverShowThePassword(_ url: String) {
        do {
            _ = try ProxyConfiguration(url: url)
            Issue.record("accepted \(url)")
        } catch {
            for piece in Self.pieces {
                #expect(!"\(error)".contains(piece), "\(error)")
            }
            #expect("\(error)".contains(URLRedaction.placeholder), "\(error)")
        }
    }

    @Test(arguments: [
        "http://bob:Zq7/Yw8@example.com/v1/ws",
        "wss://bob:Zq7/Yw8@/v1/ws",
        "ftp://bob:Zq7?Yw8@Xv9@example.com",
    ])
    func webSocketURLErrorsNeverShowThePassword(_ url: String) {
        do {
            _ = try WebSocketURLEndpoint(url: url)
            Issue.record("accepted \(url)")
        } catch {
            for piece in Self.pieces {
                #expect(!"\(error)".contains(piece), "\(error)")
            }
        }
    }

    @Test func parsedURLsKeepAnAtSignInTheirPathOrQuery() {
        // Only text that failed to parse is redacted up to its last `@`.
        #expect(URLRedaction.redacting("wss://h:443/users/@alice?x=a@b") == "wss://h:443/users/@alice?x=a@b")
        #expect(URLRedaction.redactingUnparsed("wss://h:443/users/@alice") == "wss://h:<redacted>@alice")
        #expect(URLRedaction.redactingUnparsed("http://bob:Zq7/Yw8@h:1/p?token=s&a=1") == "http://bob:<redacted>@h:1/p?token=<redacted>&a=1")
        #expect(URLRedaction.redactingUnparsed("http://h/p?a=1") == "http://h/p?a=1")
    }
}
