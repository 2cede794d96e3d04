import Testing
import SwitchboardCore

/// The `CONNECT` request an HTTP proxy tunnel sends, and how the proxy's answer is read.
@Suite("HTTP proxy tunnel")
struct HTTPProxyTunnelTests {
    static let secret = "Pw-7q!ZETA-secret"

    private func text(_ tunnel: HTTPProxyTunnel) -> String { String(decoding: tunnel.requestBytes, as: UTF8.self) }

    @Test func requestWithoutCredentials() throws {
        let tunnel = try HTTPProxyTunnel(host: "example.com", port: 443)
        #expect(text(tunnel) == "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
        #expect(tunnel.requestBytes == Array("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n".utf8))
        #expect(tunnel.authority == "example.com:443")
        #expect(!tunnel.sendsCredentials)
    }

    @Test func requestWithBasicCredentials() throws {
        let tunnel = try HTTPProxyTunnel(host: "example.com", port: 8080, username: "user", password: "pass")
        #expect(text(tunnel) == "CONNECT example.com:8080 HTTP/1.1\r\nHost: example.com:8080\r\n"
                + "Proxy-Authorization: Basic dXNlcjpwYXNz\r\n\r\n")
        #expect(tunnel.sendsCredentials)
        #expect(tunnel.authority == "example.com:8080")
    }

    @Test func credentialsAreUTF8() throws {
        let tunnel = try HTTPProxyTunnel(host: "h", port: 1, username: "jürgen", password: "pä55wörd")
        // base64(UTF-8 "jürgen:pä55wörd")
        #expect(text(tunnel) == "CONNECT h:1 HTTP/1.1\r\nHost: h:1\r\n"
                + "Proxy-Authorization: Basic asO8cmdlbjpww6Q1NXfDtnJk\r\n\r\n")
    }

    @Test func userNameWithEmptyPasswordStillSendsCredentials() throws {
        let tunnel = try HTTPProxyTunnel(host: "h", port: 65535, username: "user")
        #expect(tunnel.sendsCredentials)
        #expect(text(tunnel).contains("\r\nProxy-Authorization: Basic dXNlcjo=\r\n"))
        #expect(tunnel.authority == "h:65535")
    }

    @Test func ipv6AuthorityIsBracketed() throws {
        let tunnel = try HTTPProxyTunnel(host: "::1", port: 9000)
        #expect(tunnel.authority == "[::1]:9000")
        #expect(text(tunnel) == "CONNECT [::1]:9000 HTTP/1.1\r\nHost: [::1]:9000\r\n\r\n")
        let full = try HTTPProxyTunnel(host: "2001:db8::7", port: 443)
        #expect(full.authority == "[2001:db8::7]:443")
    }

    @Test(arguments: [0, -1, 65536, 100_000])
    func portOutOfRangeIsRefused(_ port: Int) {
        #expect(throws: HTTPProxyTunnelError.self) {
            try HTTPProxyTunnel(host: "example.com", port: port, username: "u", password: Self.secret)
        }
        do {
            _ = try HTTPProxyTunnel(host: "example.com", port: port, username: "u", password: Self.secret)
        } catch {
            guard case .invalidTarget = error else { Issue.record("wrong error \(error)"); return }
            #expect(!error.description.contains(Self.secret))
            #expect(error.description.contains("\(port)"))
        }
    }

    @Test(arguments: ["", "exa mple.com", "a\r\nX-Injected: 1", "a\nb", "a\0b", "a/b", "user@host", "[::1]", "a]",
                      "tab\there", "del\u{7F}"])
    func invalidHostIsRefused(_ host: String) {
        do {
            _ = try HTTPProxyTunnel(host: host, port: 443, username: "u", password: Self.secret)
            Issue.record("\(host.debugDescription) accepted")
        } catch {
            #expect(error == .invalidTarget(error.description))
            guard case .invalidTarget = error else { Issue.record("wrong error \(error)"); return }
            #expect(!error.description.contains(Self.secret))
            #expect(!"\(error)".contains(Self.secret))
        }
    }

    @Test(arguments: [
        ("us\rer", HTTPProxyTunnelTests.secret), ("us\ner", HTTPProxyTunnelTests.secret),
        ("us\0er", HTTPProxyTunnelTests.secret), ("user", HTTPProxyTunnelTests.secret + "\r\n"),
        ("user", "a\nb" + HTTPProxyTunnelTests.secret), ("user", HTTPProxyTunnelTests.secret + "\0"),
        ("user", "\r" + HTTPProxyTunnelTests.secret), ("us:er", HTTPProxyTunnelTests.secret),
        (":", HTTPProxyTunnelTests.secret),
    ])
    func invalidCredentialsAreRefusedWithoutShowingThePassword(_ username: String, _ password: String) {
        do {
            _ = try HTTPProxyTunnel(host: "example.com", port: 443, username: username, password: password)
            Issue.record("\(username.debugDescription) accepted")
        } catch {
            guard case .invalidCredentials(let message) = error else { Issue.record("wrong error \(error)"); return }
            #expect(!message.isEmpty)
            #expect(!error.description.contains(Self.secret), "leak: \(error)")
            #expect(!String(reflecting: error).contains(Self.secret), "leak: \(String(reflecting: error))")
            var dumped = ""
            dump(error, to: &dumped)
            #expect(!dumped.contains(Self.secret), "leak: \(dumped)")
        }
    }

    @Test func colonInThePasswordIsAllowed() throws {
        let tunnel = try HTTPProxyTunnel(host: "h", port: 80, username: "u", password: "a:b")
        #expect(text(tunnel).contains("Proxy-Authorization: Basic \(Base64.encode(Array("u:a:b".utf8)))\r\n"))
    }

    @Test func credentialCharactersAreOnlyCheckedWhenAUserNameIsGiven() throws {
        // Without a user name the password is not sent, so it is not validated either.
        let tunnel = try HTTPProxyTunnel(host: "h", port: 80, password: "a\r\nb")
        #expect(!tunnel.sendsCredentials)
        #expect(!text(tunnel).contains("Proxy-Authorization"))
    }

    @Test(arguments: [200, 201, 204, 299])
    func twoHundredsEstablishTheTunnel(_ status: Int) throws {
        let tunnel = try HTTPProxyTunnel(host: "h", port: 443)
        #expect(tunnel.outcome(of: HTTPResponseHead(status: status, reason: "Connection established")) == .established)
    }

    @Test func proxyAuthenticationRequired() throws {
        let anonymous = try HTTPProxyTunnel(host: "h", port: 443)
        #expect(anonymous.outcome(of: HTTPResponseHead(status: 407)) == .authenticationRequired(credentialsSent: false))
        let authenticated = try HTTPProxyTunnel(host: "h", port: 443, username: "u", password: "p")
        #expect(authenticated.outcome(of: HTTPResponseHead(status: 407))
                == .authenticationRequired(credentialsSent: true))
        #expect(authenticated.outcome(of: HTTPResponseHead(status: 407))
                != .authenticationRequired(credentialsSent: false))
    }

    @Test(arguments: [100, 101, 300, 301, 400, 401, 403, 404, 500, 502, 503, 504])
    func otherStatusesAreRefusals(_ status: Int) throws {
        let tunnel = try HTTPProxyTunnel(host: "h", port: 443, username: "u", password: "p")
        #expect(tunnel.outcome(of: HTTPResponseHead(status: status)) == .refused(status: status))
    }

    @Test func errorDescriptionsAreTheMessages() {
        #expect(HTTPProxyTunnelError.invalidTarget("bad").description == "bad")
        #expect(HTTPProxyTunnelError.invalidCredentials("worse").description == "worse")
        #expect(HTTPProxyTunnelError.invalidTarget("x") != .invalidCredentials("x"))
    }
}

@Suite("TLS peer certificate")
struct TLSPeerCertificateTests {
    typealias Name = TLSPeerCertificate.AlternativeName

    @Test(arguments: [
        (Name.dns("example.com"), "DNS:example.com"),
        (Name.dns("*.example.com"), "DNS:*.example.com"),
        (Name.ip("192.0.2.1"), "IP:192.0.2.1"),
        (Name.ip("2001:db8::1"), "IP:2001:db8::1"),
        (Name.email("alice@example.com"), "email:alice@example.com"),
        (Name.uri("spiffe://example.org/ns/default/sa/alice"), "URI:spiffe://example.org/ns/default/sa/alice"),
        (Name.dns(""), "DNS:"),
    ])
    func alternativeNameRoundTrip(_ name: Name, _ text: String) {
        #expect(name.description == text)
        #expect(Name(text) == name)
        #expect(Name(name.description) == name)
        #expect("\(name)" == text)
    }

    @Test(arguments: ["", "example.com", "dns:example.com", "Dns:x", "RID:1.2.3", "DirName:CN=x", "othername:x",
                      ":value", "IPAddress:1.2.3.4", " DNS:x"])
    func unknownNotationIsNil(_ text: String) {
        #expect(Name(text) == nil)
    }

    @Test(arguments: [
        ("CN=alice,O=Example", "alice"),
        ("O=Example,CN=x", "x"),
        ("CN=a\\,b,O=c", "a,b"),
        ("CN=first,CN=second", "first"),
        ("CN=a\\+b\\;c\\=d\\\\e", "a+b;c=d\\e"),
        ("CN=\\ padded\\ ", " padded "),
        ("CN=\\\"q\\\"", "\"q\""),
        ("CN=\\#hash\\<x\\>", "#hash<x>"),
        ("CN=jürgen,O=Ex", "jürgen"),
        ("CN=", ""),
        ("CN=a+UID=b,O=c", "a"),
        ("UID=b+CN=a,O=c", "a"),
        ("O=x\\,CN=fake,CN=real", "real"),
    ])
    func commonName(_ subject: String, _ expected: String) {
        #expect(TLSPeerCertificate(subject: subject).commonName == expected)
    }

    @Test(arguments: ["O=Example", "", "OU=CN=x", "O=a\\,CN=b", "XCN=y,O=z"])
    func noCommonName(_ subject: String) {
        #expect(TLSPeerCertificate(subject: subject).commonName == nil)
    }

    @Test func dnsNamesKeepOnlyDNSEntriesInOrder() {
        let certificate = TLSPeerCertificate(subject: "CN=alice", alternativeNames: [
            .dns("b.example.com"), .ip("10.0.0.1"), .email("a@example.com"), .dns("a.example.com"),
            .uri("spiffe://x/y"),
        ])
        #expect(certificate.dnsNames == ["b.example.com", "a.example.com"])
        #expect(TLSPeerCertificate(subject: "CN=x").dnsNames.isEmpty)
        #expect(TLSPeerCertificate(subject: "CN=x", alternativeNames: [.ip("::1")]).dnsNames.isEmpty)
    }

    @Test func description() {
        #expect(TLSPeerCertificate(subject: "CN=alice,O=Example").description == "CN=alice,O=Example")
        let certificate = TLSPeerCertificate(subject: "CN=alice", alternativeNames: [.dns("a.example"), .ip("::1")])
        #expect(certificate.description == "CN=alice (DNS:a.example, IP:::1)")
        #expect("\(certificate)" == "CN=alice (DNS:a.example, IP:::1)")
    }

    @Test func equality() {
        let a = TLSPeerCertificate(subject: "CN=alice", alternativeNames: [.dns("a"), .email("b")])
        #expect(a == TLSPeerCertificate(subject: "CN=alice", alternativeNames: [.dns("a"), .email("b")]))
        #expect(a != TLSPeerCertificate(subject: "CN=bob", alternativeNames: [.dns("a"), .email("b")]))
        #expect(a != TLSPeerCertificate(subject: "CN=alice", alternativeNames: [.email("b"), .dns("a")]))
        #expect(a != TLSPeerCertificate(subject: "CN=alice", alternativeNames: [.dns("a")]))
        #expect(a != TLSPeerCertificate(subject: "CN=alice"))
        #expect(TLSPeerCertificate(subject: "CN=x", alternativeNames: [.dns("a")])
                != TLSPeerCertificate(subject: "CN=x", alternativeNames: [.uri("a")]))
        #expect(a.subject == "CN=alice")
        #expect(a.alternativeNames == [.dns("a"), .email("b")])
    }
}
