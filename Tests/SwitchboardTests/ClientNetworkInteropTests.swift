import Foundation
import Testing
import SwitchboardCore
@testable import Switchboard

/// The client in real networks, against peers nobody here wrote: a real HTTP `CONNECT` proxy
/// (`proxy.py`, ``ProxyPeer``) in front of our server and of Python `websockets`, and Python
/// `websockets` servers that require client certificates, cap the TLS version, or set cookies.
/// Serialized: every test starts its own peer processes.
@Suite("Client networks: proxies, mutual TLS, pinning, cookies (real peers)", .serialized)
struct ClientNetworkInteropTests {
    static let credentials = "alice:Pr0xy-S3cret"

    /// Our echo server, plain or TLS.
    static func echoServer(tls: TLSServerConfiguration? = nil) async throws -> (WebSocketServer, Int) {
        var config = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        config.loopCount = 1
        config.tls = tls
        let server = WebSocketServer(configuration: config)
        server.route("/echo") { connection in
            for await message in connection.messages() { try? await connection.send(message) }
        }
        return (server, try await server.start())
    }

    /// Connects, sends `text`, expects it back, closes; returns the TLS version.
    static func echo(_ endpoint: WebSocketURLEndpoint, _ text: String = "through the tunnel") async throws -> String? {
        let adapter = SocketAdapter()
        let messages = try await adapter.connectMessages(to: endpoint)
        try await adapter.send(text: text)
        let reply = try await withInteropTimeout(.seconds(60), "echo") {
            var iterator = messages.makeAsyncIterator()
            return await iterator.next()
        }
        #expect(reply?.text == text)
        let version = await adapter.currentConnection?.tlsVersion
        await adapter.close()
        return version
    }

    /// The one message a Python peer path sends before closing.
    static func firstMessage(_ endpoint: WebSocketURLEndpoint) async throws -> (String?, WebSocketConnection?) {
        let adapter = SocketAdapter()
        let messages = try await adapter.connectMessages(to: endpoint)
        let connection = await adapter.currentConnection
        let message = try await withInteropTimeout(.seconds(60), "first message") {
            var iterator = messages.makeAsyncIterator()
            return await iterator.next()
        }
        await adapter.close()
        return (message?.text, connection)
    }

    static func connectError(_ endpoint: WebSocketURLEndpoint) async -> SwitchboardError? {
        await ClientInteropTests.connectError(endpoint)
    }

    /// Waits for the proxy's access log to show a tunnel to `authority` (it logs a tunnel when
    /// it ends).
    static func proxyLogged(_ proxy: ProxyPeer, _ authority: String) async -> Bool {
        await serverEventually { proxy.log.contains("CONNECT \(authority)") }
    }

    // MARK: Proxy

    @Test func wsThroughProxyWithBasicAuth() async throws {
        let (server, port) = try await Self.echoServer()
        try await ProxyPeer.with(basicAuth: Self.credentials) { proxy in
            let endpoint = try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/echo",
                                                    proxy: try ProxyConfiguration(url: proxy.url(credentials: Self.credentials)))
            #expect(try await Self.echo(endpoint) == nil)
            #expect(await Self.proxyLogged(proxy, "127.0.0.1:\(port)"), "\(proxy.log)")
            #expect(!"\(endpoint)".contains("Pr0xy-S3cret"))
            #expect("\(endpoint)".contains("proxy: http://alice:<redacted>@127.0.0.1:\(proxy.port)"))
        }
        await server.shutdown()
    }

    @Test func wssThroughProxyVerifiesTheTargetInsideTheTunnel() async throws {
        let pki = try TestPKI.get()
        let (server, port) = try await Self.echoServer(
            tls: TLSServerConfiguration(certificateChainFile: pki.serverCertificate, privateKeyFile: pki.serverKey))
        try await ProxyPeer.with(basicAuth: Self.credentials) { proxy in
            let proxyConfiguration = try ProxyConfiguration(url: proxy.url(credentials: Self.credentials))
            // The certificate names localhost: SNI and verification are against the target, not
            // the proxy (127.0.0.1, which the certificate also names, is never checked here).
            let endpoint = try WebSocketURLEndpoint(url: "wss://localhost:\(port)/echo",
                                                    tls: TLSConfiguration(trustRoots: .caFile(pki.caCertificate)),
                                                    proxy: proxyConfiguration)
            #expect(try await Self.echo(endpoint) == "TLSv1.3")
            #expect(await Self.proxyLogged(proxy, "localhost:\(port)"), "\(proxy.log)")
            // A name the certificate does not carry fails verification, tunnel or not.
            var wrongName = endpoint
            wrongName.tls.serverNameOverride = "example.com"
            let error = await Self.connectError(wrongName)
            #expect(error?.kind == .tls, "\(String(describing: error))")
            #expect(error?.message.contains("hostname mismatch") == true, "\(String(describing: error))")
            // An untrusted chain too.
            var untrusted = endpoint
            untrusted.tls = .default
            #expect(await Self.connectError(untrusted)?.kind == .tls)
        }
        await server.shutdown()
    }

    @Test func pythonServerThroughProxyWithoutAuth() async throws {
        try await withInteropPeer { peer in
            try await ProxyPeer.with { proxy in
                let endpoint = try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(peer.port)/echo",
                                                        proxy: ProxyConfiguration(host: "127.0.0.1", port: proxy.port))
                _ = try await Self.echo(endpoint, "hello python, via proxy.py")
                #expect(await Self.proxyLogged(proxy, "127.0.0.1:\(peer.port)"), "\(proxy.log)")
            }
        }
    }

    @Test func proxyAuthenticationFailures() async throws {
        let (server, port) = try await Self.echoServer()
        try await ProxyPeer.with(basicAuth: Self.credentials) { proxy in
            // No credentials.
            let none = try #require(await Self.connectError(try WebSocketURLEndpoint(
                url: "ws://127.0.0.1:\(port)/echo", proxy: ProxyConfiguration(url: proxy.url()))))
            #expect(none.kind == .proxy)
            #expect(none.httpStatus == 407)
            #expect(none.message.contains("HTTP 407"), "\(none)")
            #expect(none.message.contains("no credentials were given"), "\(none)")
            // Wrong password: named as refused credentials, the password nowhere.
            let wrong = try #require(await Self.connectError(try WebSocketURLEndpoint(
                url: "wss://localhost:\(port)/echo", proxy: ProxyConfiguration(url: proxy.url(credentials: "alice:Wr0ng-Guess")))))
            #expect(wrong.kind == .proxy)
            #expect(wrong.httpStatus == 407)
            #expect(wrong.message.contains("credentials sent were refused"), "\(wrong)")
            #expect(!wrong.description.contains("Wr0ng-Guess"))
        }
        await server.shutdown()
    }

    @Test func proxyCannotReachTheTarget() async throws {
        try await withClosedPort { closed in
            try await ProxyPeer.with { proxy in
                let error = try #require(await Self.connectError(try WebSocketURLEndpoint(
                    url: "ws://127.0.0.1:\(closed)/echo", proxy: ProxyConfiguration(url: proxy.url()))))
                #expect(error.kind == .proxy)
                #expect(error.httpStatus == 502)
                #expect(error.message.contains("could not open a tunnel to 127.0.0.1:\(closed): HTTP 502"), "\(error)")
            }
            // No proxy listening: a connect error that names the proxy.
            let noProxy = try #require(await Self.connectError(try WebSocketURLEndpoint(
                url: "ws://127.0.0.1:\(closed)/echo", proxy: ProxyConfiguration(url: "http://u:Hidden-Pw@127.0.0.1:\(closed)"))))
            #expect(noProxy.kind == .connect)
            #expect(noProxy.message.contains("proxy 127.0.0.1:\(closed)"), "\(noProxy)")
            #expect(!noProxy.description.contains("Hidden-Pw"))
        }
    }

    /// The chat client, as a user runs it: `--proxy` with a wrong password ends with an error
    /// naming the 407, and never prints the password; `--proxy-from-environment` reads
    /// `http_proxy` and honours `no_proxy`.
    @Test func chatRoomJoinThroughProxy() async throws {
        try await withClosedPort { closed in
            try await ProxyPeer.with(basicAuth: Self.credentials) { proxy in
                let wrong = try await Self.runChatJoin(
                    ["--url", "ws://127.0.0.1:\(closed)/v1/ws", "--proxy", proxy.url(credentials: "alice:Wr0ng-Guess")])
                #expect(wrong.status != 0)
                #expect(wrong.output.contains("HTTP 407"), "\(wrong.output)")
                #expect(!wrong.output.contains("Wr0ng-Guess"), "\(wrong.output)")

                let fromEnvironment = try await Self.runChatJoin(
                    ["--url", "ws://127.0.0.1:\(closed)/v1/ws", "--proxy-from-environment"],
                    environment: ["http_proxy": proxy.url(credentials: "alice:Env-Wr0ng")])
                #expect(fromEnvironment.status != 0)
                #expect(fromEnvironment.output.contains("HTTP 407"), "\(fromEnvironment.output)")
                #expect(!fromEnvironment.output.contains("Env-Wr0ng"), "\(fromEnvironment.output)")

                // no_proxy names the host: a direct connection, refused by the closed port.
                let bypassed = try await Self.runChatJoin(
                    ["--url", "ws://127.0.0.1:\(closed)/v1/ws", "--proxy-from-environment"],
                    environment: ["http_proxy": proxy.url(credentials: "alice:Env-Wr0ng"), "NO_PROXY": "localhost,127.0.0.1"])
                #expect(bypassed.status != 0)
                #expect(bypassed.output.contains("cannot connect to 127.0.0.1:\(closed)"), "\(bypassed.output)")
                #expect(!bypassed.output.contains("HTTP 407") && !bypassed.output.contains("proxy"), "\(bypassed.output)")
            }
        }
    }

    static func runChatJoin(_ arguments: [String], environment: [String: String] = [:]) async throws
        -> (status: Int32, output: String) {
        let binary = try ExamplesTests.binary("chat-room")
        return try await onServerTestThread {
            let process = Process()
            process.executableURL = binary
            process.arguments = ["join", "--user", "tester", "--no-reconnect"] + arguments
            var env = ProcessInfo.processInfo.environment
            for name in ["http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "no_proxy", "NO_PROXY"] {
                env[name] = nil
            }
            env.merge(environment) { $1 }
            process.environment = env
            let output = Pipe()
            process.standardOutput = output
            process.standardError = output
            process.standardInput = FileHandle.nullDevice
            try process.run()
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (process.terminationStatus, String(decoding: data, as: UTF8.self))
        }
    }

    // MARK: Mutual TLS, pinning and versions against Python websockets

    static func tlsPeerArguments(_ pki: TestPKI, _ extra: [String] = []) -> [String] {
        ["--tls-cert", pki.serverCertificate, "--tls-key", pki.serverKey] + extra
    }

    @Test func pythonServerRequiringClientCertificates() async throws {
        let pki = try TestPKI.get()
        try await withInteropPeer(Self.tlsPeerArguments(pki, ["--tls-client-ca", pki.caCertificate])) { peer in
            var tls = TLSConfiguration(trustRoots: .caFile(pki.caCertificate))
            tls.clientCertificate = .init(certificateChainFile: pki.aliceCertificate, privateKeyFile: pki.aliceEncryptedKey,
                                          privateKeyPassphrase: TLSPassphrase(pki.alicePassphrase))
            let (subject, _) = try await Self.firstMessage(
                try WebSocketURLEndpoint(url: "wss://localhost:\(peer.port)/whoami", tls: tls))
            #expect(subject == "CN=alice,O=Example")
            // Without a certificate: Python's server closes (or resets) without an alert once it
            // has checked, after our TLS 1.3 handshake has ended; the error says what that
            // usually means.
            let error = await Self.connectError(try WebSocketURLEndpoint(
                url: "wss://localhost:\(peer.port)/whoami", tls: TLSConfiguration(trustRoots: .caFile(pki.caCertificate))))
            #expect(error?.kind == .handshakeFailed, "\(String(describing: error))")
            #expect(error?.message.contains("require a client certificate") == true, "\(String(describing: error))")
            // Over TLS 1.2 the certificate is checked inside the handshake: a TLS error.
            var tls12 = TLSConfiguration(trustRoots: .caFile(pki.caCertificate))
            tls12.maximumVersion = .tls12
            let error12 = await Self.connectError(try WebSocketURLEndpoint(
                url: "wss://localhost:\(peer.port)/whoami", tls: tls12))
            #expect(error12?.kind == .tls || error12?.kind == .io, "\(String(describing: error12))")
        }
    }

    @Test func pythonServerCappedAtTLS12() async throws {
        let pki = try TestPKI.get()
        let trust = TLSConfiguration(trustRoots: .caFile(pki.caCertificate))
        try await withInteropPeer(Self.tlsPeerArguments(pki, ["--tls-max-version", "1.2"])) { peer in
            let (version, connection) = try await Self.firstMessage(
                try WebSocketURLEndpoint(url: "wss://localhost:\(peer.port)/tls-version", tls: trust))
            #expect(version == "TLSv1.2")
            #expect(connection?.tlsVersion == "TLSv1.2")
        }
        try await withInteropPeer(Self.tlsPeerArguments(pki)) { peer in
            let (defaultVersion, _) = try await Self.firstMessage(
                try WebSocketURLEndpoint(url: "wss://localhost:\(peer.port)/tls-version", tls: trust))
            #expect(defaultVersion == "TLSv1.3")
            var capped = trust
            capped.maximumVersion = .tls12
            let (version, connection) = try await Self.firstMessage(
                try WebSocketURLEndpoint(url: "wss://localhost:\(peer.port)/tls-version", tls: capped))
            #expect(version == "TLSv1.2")
            #expect(connection?.tlsVersion == "TLSv1.2")
        }
    }

    @Test func pinningAgainstPythonServer() async throws {
        let pki = try TestPKI.get()
        try await withInteropPeer(Self.tlsPeerArguments(pki)) { peer in
            var tls = TLSConfiguration(trustRoots: .caFile(pki.caCertificate))
            tls.publicKeyPins = .init(sha256: [try pki.pin(ofCertificate: pki.serverCertificate)])
            let endpoint = try WebSocketURLEndpoint(url: "wss://localhost:\(peer.port)/echo", tls: tls)
            _ = try await Self.echo(endpoint, "pinned")
            var mismatch = endpoint
            mismatch.tls.publicKeyPins = .init(sha256: [try pki.pin(ofCertificate: pki.selfSignedCertificate)])
            let error = await Self.connectError(mismatch)
            #expect(error?.kind == .certificatePinning, "\(String(describing: error))")
        }
    }

    /// The example server as an operator runs it: `--tls-client-ca` requires a client
    /// certificate, `--tls-key-passphrase-file` unlocks an encrypted key.
    @Test func echoServerBinaryRequiresClientCertificates() async throws {
        let pki = try TestPKI.get()
        let passphraseFile = pki.directory + "/server-passphrase.txt"
        try (pki.alicePassphrase + "\n").write(toFile: passphraseFile, atomically: true, encoding: .utf8)
        let server = try await ChildServer.start("echo-server", [
            "--port", "0", "--tls-cert", pki.serverCertificate, "--tls-key", pki.serverEncryptedKey,
            "--tls-key-passphrase-file", passphraseFile, "--tls-client-ca", pki.caCertificate,
        ])
        defer { server.stop() }
        var tls = TLSConfiguration(trustRoots: .caFile(pki.caCertificate))
        tls.clientCertificate = .init(certificateChainFile: pki.clientCertificate, privateKeyFile: pki.clientKey)
        _ = try await Self.echo(try WebSocketURLEndpoint(url: "wss://localhost:\(server.port)/", tls: tls), "mutual")
        let error = await Self.connectError(try WebSocketURLEndpoint(
            url: "wss://localhost:\(server.port)/", tls: TLSConfiguration(trustRoots: .caFile(pki.caCertificate))))
        #expect(MutualTLSAndPinningTests.refusedForItsCertificate(error), "\(String(describing: error))")
    }

    // MARK: Cookies

    @Test func cookiesBothWays() async throws {
        try await withInteropPeer { peer in
            let endpoint = try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(peer.port)/cookie",
                                                    headers: [("Cookie", "theme=dark; session=prev")])
            let (echoed, connection) = try await Self.firstMessage(endpoint)
            #expect(echoed == "theme=dark; session=prev")
            #expect(connection?.setCookies == ["session=abc123; Path=/; HttpOnly"])
            #expect(connection?.handshakeResponse?.status == 101)
            #expect(!"\(endpoint)".contains("theme=dark"))
            // A cookie value with CR/LF is refused before anything is sent.
            let injected = try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(peer.port)/cookie",
                                                    headers: [("Cookie", "a=1\r\nX-Injected: yes")])
            let error = await Self.connectError(injected)
            #expect(error?.kind == .invalidArgument, "\(String(describing: error))")
        }
    }
}
