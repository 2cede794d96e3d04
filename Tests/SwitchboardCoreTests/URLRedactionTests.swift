import Testing
import SwitchboardCore

@Suite("URL redaction")
struct URLRedactionTests {
    @Test(arguments: ["token", "TOKEN", "access_token", "api_key", "API_KEY", "key", "password", "secret", "auth",
                      "refresh_token", "tokenId", "x-Token-y", "%74oken", "api%5Fkey", "sentinelPassword", "db_password"])
    func secretNames(_ name: String) {
        #expect(URLRedaction.isSecretQueryName(name))
    }

    @Test(arguments: ["session_id", "room", "user", "keys", "author", "secrets", "tok", ""])
    func ordinaryNames(_ name: String) {
        #expect(!URLRedaction.isSecretQueryName(name))
    }

    @Test func redactsOnlySecretValues() {
        #expect(URLRedaction.redacting("/v1/ws?session_id=abc&token=s3cr3t")
                == "/v1/ws?session_id=abc&token=<redacted>")
        #expect(URLRedaction.redacting("wss://h:443/p?Access_Token=a&room=r&api_key=b&refresh_token=c#frag")
                == "wss://h:443/p?Access_Token=<redacted>&room=r&api_key=<redacted>&refresh_token=<redacted>#frag")
        #expect(URLRedaction.redacting("/p?a=1&&token=x=y&flag") == "/p?a=1&&token=<redacted>&flag")
        #expect(URLRedaction.redacting("/p?token") == "/p?token")
        #expect(URLRedaction.redacting("/plain") == "/plain")
        #expect(URLRedaction.redacting("/p?") == "/p?")
    }

    @Test func redactsTheUserInfoPassword() {
        #expect(URLRedaction.redacting("ws://bob:hunter2@h:80/p?x=1") == "ws://bob:<redacted>@h:80/p?x=1")
        #expect(URLRedaction.redacting("ws://bob@h/p") == "ws://bob@h/p")
        #expect(URLRedaction.redacting("ws://h/p?email=a@b:c") == "ws://h/p?email=a@b:c")
    }
}
