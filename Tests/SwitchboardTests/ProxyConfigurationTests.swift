import Foundation
import Testing
@testable import Switchboard
import SwitchboardCore
import SwitchboardTestSupport

/// Proxy URLs, the environment's proxy variables and `NO_PROXY`, and that no textual form ever
/// shows a proxy password.
@Suite struct ProxyConfigurationTests {
    static let secret = "Zq9-PROXY-PASSWORD-xK2"

    /// The proxy a configuration names, whatever the environment says.
    static func server(_ proxy: ProxyConfiguration) throws -> HTTPProxyServer? {
        try proxy.server(for: .ws, host: "target.example", port: 80, environment: [:])
    }

    static func renderings(_ value: some Any) -> [String] {
        var dumped = ""
        dump(value, to: &dumped)
        return ["\(value)", String(describing: value), String(reflecting: value), dumped,
                "\(Mirror(reflecting: value).children.map { "\($0.label ?? ""): \($0.value)" })"]
    }

    // MARK: URL parsing

    @Test func fullURL() throws {
        let server = try #require(try Self.server(ProxyConfiguration(url: "http://u:p@h:3128")))
        #expect(server == HTTPProxyServer(host: "h", port: 3128, username: "u", password: "p"))
        #expect(server.address == "h:3128")
    }

    @Test func hostAndPortWithoutScheme() throws {
        let server = try #require(try Self.server(ProxyConfiguration(url: "proxy.internal:3128")))
        #expect(server.host == "proxy.internal")
        #expect(server.port == 3128)
        #expect(server.username == nil)
        #expect(server.password == "")
        let withCredentials = try HTTPProxyServer(url: "bob:pw@proxy.internal:8080")
        #expect(withCredentials == HTTPProxyServer(host: "proxy.internal", port: 8080, username: "bob", password: "pw"))
    }

    @Test(arguments: ["http://proxy.internal", "http://proxy.internal/", "HTTP://proxy.internal", "proxy.internal"])
    func defaultPortIs80(_ url: String) throws {
        let server = try HTTPProxyServer(url: url)
        #expect(server.port == 80)
        #expect(server.host == "proxy.internal")
    }

    @Test func credentialsArePercentDecoded() throws {
        let server = try HTTPProxyServer(url: "http://us%40er%20x:p%3As%2Fs%40%25@h:3128")
        #expect(server.username == "us@er x")
        #expect(server.password == "p:s/s@%")
        let utf8 = try HTTPProxyServer(url: "http://j%C3%BCrgen:w%C3%B6rd@h")
        #expect(utf8.username == "jürgen")
        #expect(utf8.password == "wörd")
    }

    @Test func userWithoutPassword() throws {
        let server = try HTTPProxyServer(url: "http://alice@h:3128")
        #expect(server.username == "alice")
        #expect(server.password == "")
    }

    @Test func ipv6Proxy() throws {
        let server = try HTTPProxyServer(url: "http://[::1]:8080")
        #expect(server.host == "::1")
        #expect(server.port == 8080)
        #expect(server.address == "[::1]:8080")
        #expect(server.redactedURL == "http://[::1]:8080")
        let bare = try HTTPProxyServer(url: "[2001:db8::2]:3128")
        #expect(bare.host == "2001:db8::2")
        #expect(bare.port == 3128)
        let configured = ProxyConfiguration(host: "[::1]", port: 8080)
        #expect(try Self.server(configured) == HTTPProxyServer(host: "::1", port: 8080, username: nil, password: ""))
        #expect(configured.description == "http://[::1]:8080")
    }

    @Test func equalityOfTheWaysToNameAProxy() throws {
        #expect(try ProxyConfiguration(url: "http://u:p@h:3128")
                == ProxyConfiguration(host: "h", port: 3128, username: "u", password: "p"))
        #expect(try ProxyConfiguration(url: "http://u:p@h:3128")
                != ProxyConfiguration(host: "h", port: 3128, username: "u", password: "q"))
        #expect(ProxyConfiguration.none != .environment)
        #expect(try ProxyConfiguration(url: "h:80") != .none)
    }

    @Test(arguments: [
        "https://u:\(ProxyConfigurationTests.secret)@h:3128",
        "HTTPS://u:\(ProxyConfigurationTests.secret)@h",
        "socks5://u:\(ProxyConfigurationTests.secret)@h:1080",
        "socks5h://h:1080",
        "ftp://h",
    ])
    func otherSchemesAreRefused(_ url: String) {
        Self.expectRefusal(url, mentioning: "scheme")
    }

    @Test(arguments: [
        "http://", "http://:3128", "http://u:\(ProxyConfigurationTests.secret)@:3128",
        "http://u:\(ProxyConfigurationTests.secret)@", "u:\(ProxyConfigurationTests.secret)@:3128",
    ])
    func missingHostIsRefused(_ url: String) {
        Self.expectRefusal(url)
    }

    @Test(arguments: [
        "http://u:\(ProxyConfigurationTests.secret)@h:3128/path",
        "http://u:\(ProxyConfigurationTests.secret)@h:3128/?q=1",
        "http://u:\(ProxyConfigurationTests.secret)@h:3128?q=1",
        "http://u:\(ProxyConfigurationTests.secret)@h:3128/#frag",
        "u:\(ProxyConfigurationTests.secret)@h:3128/path",
    ])
    func pathQueryOrFragmentIsRefused(_ url: String) {
        Self.expectRefusal(url)
    }

    @Test(arguments: [
        "http://u:\(ProxyConfigurationTests.secret)@h:0",
        "http://u:\(ProxyConfigurationTests.secret)@h:65536",
        "http://u:\(ProxyConfigurationTests.secret)@h:70000",
        "u:\(ProxyConfigurationTests.secret)@h:99999",
        "http://u:\(ProxyConfigurationTests.secret)@h:-1",
        "http://u:\(ProxyConfigurationTests.secret)@h:port",
    ])
    func portOutOfRangeIsRefused(_ url: String) {
        Self.expectRefusal(url)
    }

    static func expectRefusal(_ url: String, mentioning word: String? = nil,
                              sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            let proxy = try ProxyConfiguration(url: url)
            Issue.record("\(url) accepted as \(proxy)", sourceLocation: sourceLocation)
        } catch {
            #expect(error.kind == .invalidArgument, sourceLocation: sourceLocation)
            #expect(!error.message.isEmpty, sourceLocation: sourceLocation)
            for text in [error.message, error.description, "\(error)", String(reflecting: error),
                         error.localizedDescription] {
                #expect(!text.contains(secret), "leak: \(text)", sourceLocation: sourceLocation)
            }
            var dumped = ""
            dump(error, to: &dumped)
            #expect(!dumped.contains(secret), "leak: \(dumped)", sourceLocation: sourceLocation)
            if let word { #expect(error.message.contains(word), "\(error.message)", sourceLocation: sourceLocation) }
        }
    }

    /// Refusals show the URL (`http://` added when it had no scheme) with the password redacted.
    @Test(arguments: ["u:\(ProxyConfigurationTests.secret)@h:3128/x", "http://u:\(ProxyConfigurationTests.secret)@h:3128/x?q=1",
                     "http://u:a@b\(ProxyConfigurationTests.secret)@h/p"])
    func refusedURLsShowNoPassword(url: String) {
        do {
            _ = try ProxyConfiguration(url: url)
            Issue.record("accepted \(url)")
        } catch {
            #expect(!error.message.contains(Self.secret), "\(error.message)")
            #expect(error.message.contains("http://u:<redacted>@"), "\(error.message)")
        }
    }

    // MARK: No password in any textual form

    @Test func descriptionsRedactThePassword() throws {
        let proxies = [
            try ProxyConfiguration(url: "http://user:\(Self.secret)@proxy.example:3128"),
            ProxyConfiguration(host: "proxy.example", port: 3128, username: "user", password: Self.secret),
        ]
        for proxy in proxies {
            #expect(proxy.description == "http://user:<redacted>@proxy.example:3128")
            #expect(proxy.debugDescription == "ProxyConfiguration(http://user:<redacted>@proxy.example:3128)")
            for text in Self.renderings(proxy) + [proxy.description, proxy.debugDescription] {
                #expect(!text.contains(Self.secret), "leak: \(text)")
                #expect(text.contains("<redacted>"), "\(text)")
            }
            // Inside a collection or optional too.
            for text in Self.renderings([proxy]) + Self.renderings(Optional(proxy)) {
                #expect(!text.contains(Self.secret), "leak: \(text)")
            }
        }
    }

    @Test func percentEncodedPasswordIsNotShownEitherWay() throws {
        let proxy = try ProxyConfiguration(url: "http://user:pa%24%24-\(Self.secret)@h:1")
        #expect(try Self.server(proxy)?.password == "pa$$-\(Self.secret)")
        for text in Self.renderings(proxy) {
            #expect(!text.contains(Self.secret), "leak: \(text)")
        }
    }

    @Test func userNameIsShownPercentEncoded() {
        let proxy = ProxyConfiguration(host: "h", port: 8080, username: "us@er", password: Self.secret)
        #expect(proxy.description == "http://us%40er:<redacted>@h:8080")
    }

    @Test func userWithoutPasswordIsShownWithoutAnyPassword() throws {
        let proxy = try ProxyConfiguration(url: "http://alice@h:3128")
        #expect(proxy.description.hasPrefix("http://alice"))
        #expect(proxy.description.hasSuffix("@h:3128"))
    }

    @Test func descriptionsOfTheOtherCases() throws {
        #expect(ProxyConfiguration.none.description == "none")
        #expect(ProxyConfiguration.environment.description == "environment")
        #expect(ProxyConfiguration.none.debugDescription == "ProxyConfiguration(none)")
        #expect(ProxyConfiguration.environment.debugDescription == "ProxyConfiguration(environment)")
        #expect(try ProxyConfiguration(url: "h:3128").description == "http://h:3128")
        #expect(try ProxyConfiguration(url: "http://h").description == "http://h:80")
    }

    @Test func endpointDescriptionShowsTheProxyWithoutItsPassword() throws {
        let proxy = try ProxyConfiguration(url: "http://user:\(Self.secret)@proxy.example:3128")
        let endpoint = try WebSocketURLEndpoint(url: "wss://api.example.com/ws", proxy: proxy)
        #expect(endpoint.description == "wss://api.example.com:443/ws proxy: http://user:<redacted>@proxy.example:3128")
        for text in EndpointDescriptionTests.renderings(endpoint) + Self.renderings(endpoint) {
            #expect(!text.contains(Self.secret), "leak: \(text)")
        }
        let direct = try WebSocketURLEndpoint(url: "ws://h/p")
        #expect(!direct.description.contains("proxy"))
        let environment = try WebSocketURLEndpoint(url: "ws://h/p", proxy: .environment)
        #expect(environment.description == "ws://h:80/p proxy: environment")
    }

    // MARK: Environment

    @Test func explicitAndDirectConfigurationsIgnoreTheEnvironment() throws {
        let env = ["http_proxy": "http://env:3128", "https_proxy": "http://env:3129", "no_proxy": "*"]
        #expect(try ProxyConfiguration.none.server(for: .wss, host: "h", port: 443, environment: env) == nil)
        let explicit = ProxyConfiguration(host: "p", port: 1)
        #expect(try explicit.server(for: .wss, host: "h", port: 443, environment: env)
                == HTTPProxyServer(host: "p", port: 1, username: nil, password: ""))
    }

    @Test func wssUsesHTTPSProxyLowercaseFirst() throws {
        let both = ["https_proxy": "http://lower:1", "HTTPS_PROXY": "http://upper:2", "http_proxy": "http://plain:3"]
        #expect(try ProxyConfiguration.environment.server(for: .wss, host: "h", port: 443, environment: both)?.host
                == "lower")
        let upper = ["HTTPS_PROXY": "http://upper:2", "http_proxy": "http://plain:3"]
        let server = try ProxyConfiguration.environment.server(for: .wss, host: "h", port: 443, environment: upper)
        #expect(server?.host == "upper")
        #expect(server?.port == 2)
        // http_proxy is not used for wss.
        #expect(try ProxyConfiguration.environment.server(for: .wss, host: "h", port: 443,
                                                          environment: ["http_proxy": "http://plain:3"]) == nil)
    }

    @Test func wsUsesHTTPProxyLowercaseFirst() throws {
        let both = ["http_proxy": "http://lower:1", "HTTP_PROXY": "http://upper:2", "https_proxy": "http://tls:3"]
        #expect(try ProxyConfiguration.environment.server(for: .ws, host: "h", port: 80, environment: both)?.host
                == "lower")
        #expect(try ProxyConfiguration.environment.server(for: .ws, host: "h", port: 80,
                                                          environment: ["HTTP_PROXY": "u:p@upper:2"])
                == HTTPProxyServer(host: "upper", port: 2, username: "u", password: "p"))
        // https_proxy is not used for ws.
        #expect(try ProxyConfiguration.environment.server(for: .ws, host: "h", port: 80,
                                                          environment: ["https_proxy": "http://tls:3"]) == nil)
    }

    @Test func emptyValuesAreIgnored() throws {
        let env = ["https_proxy": "", "HTTPS_PROXY": "http://upper:2"]
        #expect(try ProxyConfiguration.environment.server(for: .wss, host: "h", port: 443, environment: env)?.host
                == "upper")
        #expect(try ProxyConfiguration.environment.server(for: .wss, host: "h", port: 443,
                                                          environment: ["https_proxy": "", "HTTPS_PROXY": ""]) == nil)
        #expect(try ProxyConfiguration.environment.server(for: .ws, host: "h", port: 80,
                                                          environment: ["http_proxy": ""]) == nil)
    }

    @Test func noVariableMeansDirect() throws {
        #expect(try ProxyConfiguration.environment.server(for: .wss, host: "h", port: 443, environment: [:]) == nil)
        #expect(try ProxyConfiguration.environment.server(for: .ws, host: "h", port: 80,
                                                          environment: ["no_proxy": "other", "PATH": "/bin"]) == nil)
    }

    @Test(arguments: [
        "https://u:\(ProxyConfigurationTests.secret)@p:3128",
        "socks5://u:\(ProxyConfigurationTests.secret)@p:1080",
        "http://u:\(ProxyConfigurationTests.secret)@p:3128/path",
        "http://u:\(ProxyConfigurationTests.secret)@:3128",
        "http://u:\(ProxyConfigurationTests.secret)@p:99999",
    ])
    func invalidVariableIsAnInvalidArgument(_ value: String) {
        for (scheme, name) in [(SocketScheme.wss, "https_proxy"), (.ws, "HTTP_PROXY")] {
            do {
                let server = try ProxyConfiguration.environment.server(for: scheme, host: "h", port: 1,
                                                                       environment: [name: value])
                Issue.record("\(value) accepted as \(String(describing: server))")
            } catch {
                #expect(error.kind == .invalidArgument)
                #expect(error.message.contains(scheme.rawValue), "\(error.message)")
                for text in [error.message, "\(error)", String(reflecting: error)] {
                    #expect(!text.contains(Self.secret), "leak: \(text)")
                }
            }
        }
    }

    @Test func noProxyIsReadFromEitherVariable() throws {
        let proxy = ["https_proxy": "http://p:1"]
        for name in ["no_proxy", "NO_PROXY"] {
            var env = proxy
            env[name] = "example.com"
            #expect(try ProxyConfiguration.environment.server(for: .wss, host: "api.example.com", port: 443,
                                                              environment: env) == nil)
            #expect(try ProxyConfiguration.environment.server(for: .wss, host: "other.com", port: 443,
                                                              environment: env)?.host == "p")
        }
        var both = proxy
        both["no_proxy"] = "example.com"
        both["NO_PROXY"] = "other.com"
        #expect(try ProxyConfiguration.environment.server(for: .wss, host: "example.com", port: 443,
                                                          environment: both) == nil)
        #expect(try ProxyConfiguration.environment.server(for: .wss, host: "other.com", port: 443,
                                                          environment: both)?.host == "p")
    }

    /// As for the proxy variables, an empty `no_proxy` counts as unset (curl's behaviour).
    @Test func emptyLowercaseNoProxyFallsBackToUppercase() throws {
        let env = ["https_proxy": "http://p:1", "no_proxy": "", "NO_PROXY": "example.com"]
        #expect(try ProxyConfiguration.environment.server(for: .wss, host: "example.com", port: 443,
                                                          environment: env) == nil)
    }

    @Test func noProxyExemptionSkipsAnInvalidProxyValue() throws {
        // An exempt host never needs the proxy, so its (invalid) URL is not looked at.
        let env = ["http_proxy": "socks5://p:1", "no_proxy": "h"]
        #expect(try ProxyConfiguration.environment.server(for: .ws, host: "h", port: 80, environment: env) == nil)
    }

    // MARK: NO_PROXY matching

    @Test(arguments: [
        ("*", "anything.example", 443, true),
        ("a.com, *", "b.net", 80, true),
        ("example.com", "example.com", 443, true),
        ("example.com", "api.example.com", 443, true),
        ("example.com", "a.b.example.com", 80, true),
        ("example.com", "badexample.com", 443, false),
        ("example.com", "example.com.evil.net", 443, false),
        ("example.com", "example.org", 443, false),
        (".example.com", "api.example.com", 443, true),
        (".example.com", "example.com", 443, true),
        (".example.com", "badexample.com", 443, false),
        ("*.example.com", "api.example.com", 443, true),
        ("*.example.com", "badexample.com", 443, false),
        ("10.0.0.1", "10.0.0.1", 80, true),
        ("10.0.0.1", "10.0.0.12", 80, false),
        ("10.0.0.1", "110.0.0.1", 80, false),
        ("10.0.0.1", "10.0.0.2", 80, false),
        ("::1", "::1", 80, true),
        ("::1", "[::1]", 80, true),
        ("::1", "::2", 80, false),
        ("host:8080", "host", 8080, true),
        ("host:8080", "host", 8081, false),
        ("host:8080", "api.host", 8080, true),
        ("[::1]:9000", "::1", 9000, true),
        ("[::1]:9000", "[::1]", 9000, true),
        ("[::1]:9000", "::1", 9001, false),
        ("[::1]", "::1", 1234, true),
        (" other.com ,  example.com  ", "example.com", 443, true),
        ("\texample.com\t", "example.com", 443, true),
        ("other.com , example.net", "example.com", 443, false),
        ("example.com.", "api.example.com", 443, true),
        ("example.com", "example.com.", 443, true),
        (".example.com.", "api.example.com.", 443, true),
        ("EXAMPLE.com", "Api.Example.COM", 443, true),
        ("example.com", "EXAMPLE.COM", 443, true),
        ("", "example.com", 443, false),
        (",, ,", "example.com", 443, false),
        (".", "example.com", 443, false),
        ("localhost,127.0.0.1", "127.0.0.1", 80, true),
        ("localhost,127.0.0.1", "localhost", 80, true),
        ("localhost,127.0.0.1", "127.0.0.2", 80, false),
    ])
    func noProxy(_ list: String, _ host: String, _ port: Int, _ expected: Bool) {
        #expect(ProxyConfiguration.noProxy(list, matches: host, port: port) == expected)
    }

    // MARK: TLS passphrase

    @Test func passphraseIsNeverPrinted() {
        let passphrase = TLSPassphrase(Self.secret)
        #expect(passphrase.value == Self.secret)
        #expect(passphrase.description == "<redacted>")
        #expect(passphrase.debugDescription == "<redacted>")
        for text in Self.renderings(passphrase) {
            #expect(!text.contains(Self.secret), "leak: \(text)")
        }
        let literal: TLSPassphrase = "literal-Zq9-PROXY-PASSWORD-xK2"
        #expect(literal.value == "literal-\(Self.secret)")
        #expect(literal == TLSPassphrase("literal-\(Self.secret)"))
        for text in Self.renderings(literal) {
            #expect(!text.contains(Self.secret), "leak: \(text)")
        }
        #expect(literal != passphrase)
    }

    @Test func tlsConfigurationsDoNotShowThePassphrase() {
        let certificate = TLSConfiguration.ClientCertificate(certificateChainFile: "/etc/client.pem",
                                                             privateKeyFile: "/etc/client.key",
                                                             privateKeyPassphrase: TLSPassphrase(Self.secret))
        let config = TLSConfiguration(clientCertificate: certificate)
        let server = TLSServerConfiguration(certificateChainFile: "/etc/server.pem", privateKeyFile: "/etc/server.key",
                                            privateKeyPassphrase: TLSPassphrase(Self.secret))
        for text in Self.renderings(config) + Self.renderings(certificate) + Self.renderings(server) {
            #expect(!text.contains(Self.secret), "leak: \(text)")
        }
        #expect("\(config)".contains("<redacted>"))
        #expect("\(config)".contains("/etc/client.key"))
        #expect("\(server)".contains("<redacted>"))
        #expect(config.clientCertificate?.privateKeyPassphrase?.value == Self.secret)
    }

    @Test(arguments: [
        ("s3cret\n", "s3cret"),
        ("s3cret", "s3cret"),
        ("s3cret\nsecond line\n", "s3cret"),
        ("with spaces  \n", "with spaces  "),
        ("\n", ""),
        ("", ""),
        ("pässwörd\n", "pässwörd"),
    ])
    func passphraseFileFirstLine(_ contents: String, _ expected: String) throws {
        let path = try Self.writePassphraseFile(contents)
        #expect(try TLSPassphrase(contentsOfFile: path).value == expected)
    }

    /// Windows line endings: the trailing `\r\n` is not part of the passphrase.
    @Test(arguments: [
        ("s3cret\r\n", "s3cret"),
        ("s3cret\r\nsecond line\r\n", "s3cret"),
    ])
    func passphraseFileFirstLineWithCRLF(_ contents: String, _ expected: String) throws {
        let path = try Self.writePassphraseFile(contents)
        let value = try TLSPassphrase(contentsOfFile: path).value
        #expect(value == expected, "got \(value.debugDescription)")
    }

    static func writePassphraseFile(_ contents: String) throws -> String {
        let path = try TestTemporaryDirectory.make(prefix: "passphrase").appendingPathComponent("pass.txt").path
        try #require(FileManager.default.createFile(atPath: path, contents: Data(contents.utf8)))
        return path
    }

    /// A missing file, and one that is not UTF-8: refused, naming the path (never the contents).
    @Test(arguments: [nil, Data([0x41, 0xFF, 0xFE, 0x42, 0x0A])])
    func unreadablePassphraseFileIsRefusedNamingThePath(contents: Data?) throws {
        let path = try TestTemporaryDirectory.make(prefix: "passphrase").appendingPathComponent("pass.bin").path
        if let contents { try #require(FileManager.default.createFile(atPath: path, contents: contents)) }
        do {
            let passphrase = try TLSPassphrase(contentsOfFile: path)
            Issue.record("read \(passphrase)")
        } catch {
            #expect(error.kind == .invalidArgument)
            #expect(error.message.contains(path), "\(error.message)")
        }
    }


    // MARK: TLS defaults

    @Test func serverConfigurationDefaults() {
        let server = TLSServerConfiguration(certificateChainFile: "c.pem", privateKeyFile: "k.pem")
        #expect(server.clientCertificates == .notRequested)
        #expect(server.maximumVersion == nil)
        #expect(server.minimumVersion == .tls12)
        #expect(server.privateKeyPassphrase == nil)
        let mutual = TLSServerConfiguration(certificateChainFile: "c.pem", privateKeyFile: "k.pem",
                                            maximumVersion: .tls13, clientCertificates: .required(trustedCAFile: "ca"))
        #expect(mutual.clientCertificates == .required(trustedCAFile: "ca"))
        #expect(mutual.clientCertificates != .requested(trustedCAFile: "ca"))
        #expect(mutual.maximumVersion == .tls13)
    }

    @Test func clientConfigurationDefaults() {
        let config = TLSConfiguration.default
        #expect(config.maximumVersion == nil)
        #expect(config.publicKeyPins == nil)
        #expect(config.minimumVersion == .tls12)
        #expect(config.clientCertificate == nil)
        let pins = TLSConfiguration.PublicKeyPins(sha256: ["abc="])
        #expect(pins.mode == .inAdditionToChainVerification)
        #expect(TLSConfiguration.ClientCertificate(certificateChainFile: "c", privateKeyFile: "k")
                .privateKeyPassphrase == nil)
    }
}
