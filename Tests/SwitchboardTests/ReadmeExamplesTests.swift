import Foundation
import Logging
import Testing
@testable import Switchboard
import SwitchboardCore
#if ServiceLifecycleSupport
import ServiceLifecycle
#endif

// The README's snippets, verbatim (keep in sync with README.md). They must compile; the client
// one is run against a real server below, and the callback route one too.

struct ChatEndpoint: SocketEndpoint {
    var scheme: SocketScheme { .ws }
    var host: String { "127.0.0.1" }
    var port: Int
    var path: String { "/v1/ws" }
}

struct Join: JSONSocketCommand { var type = "join"; var room: String; var user: String }
struct Say: JSONSocketCommand { var type = "message"; var room: String; var text: String }

func chat(port: Int) async throws {
    let socket = SocketAdapter()
    let lines = try await socket.connect(to: ChatEndpoint(port: port))
    try await socket.send(command: Join(room: "general", user: "alice"))
    try await socket.send(command: Say(room: "general", text: "hello"))
    for await line in lines {                       // one element per received line
        print(String(decoding: line, as: UTF8.self))
        if line.contains(UInt8(ascii: "!")) { break }
    }
    await socket.close()                            // idempotent; code 1000
}

@MainActor func answer(port: Int) async throws {
    let socket = SocketAdapter()
    for await line in try await socket.connectLines(to: ChatEndpoint(port: port)) {
        try await socket.send(command: Say(room: "general", text: "seen \(line.count) bytes"))
    }
}

func serve() async throws {
    let server = WebSocketServer(configuration: .init(host: "127.0.0.1", port: 8080))
    server.route("/v1/ws", authenticate: { request in
        ConstantTime.equals(request.bearerToken ?? "", "s3cret")
            ? .accept(userInfo: ["user": "alice"]) : .unauthorized()
    }) { connection in
        for await line in connection.lines() {      // echo every line back
            try await connection.send(text: String(decoding: line, as: UTF8.self) + "\n")
        }                                           // a throw is logged and closes with 1011
    }
    try await server.run()  // until the task is cancelled: then 1001 to all, wait, return
}

func serveCompressed() async throws {
    var configuration = WebSocketServerConfiguration(host: "127.0.0.1", port: 8080)
    configuration.connection.compression = .default   // no context takeover: shared zlib streams
    let server = WebSocketServer(configuration: configuration)
    server.route("/account", compression: false) { connection in   // this route never compresses
        try await connection.send(text: "balance: 42")
    }
    server.route("/feed") { connection in
        try await connection.send(text: String(repeating: "{\"tick\":1}", count: 100))  // compressed
        try await connection.send(text: "token=…", compress: false)                    // this one not
    }
    try await server.run()
}

func addCallbackRoute(to server: WebSocketServer) {
    server.route("/echo", callbacks: WebSocketCallbacks(onMessage: { connection, message in
        _ = try connection.sendNow(message)   // queued at once; the connection stops reading while
    }))                                   // its outbound queue is above the high-water mark
}

#if ServiceLifecycleSupport
func serveInAServiceGroup(logger: Logger) async throws {
    let server = WebSocketServer(configuration: .init(host: "0.0.0.0", port: 8080))
    let group = ServiceGroup(configuration: .init(services: [server], gracefulShutdownSignals: [.sigterm],
                                                  logger: logger))
    try await group.run()
}
#endif

func connectFromTheOffice() async throws {
    var tls = TLSConfiguration(trustRoots: .caFile("internal-ca.pem"))
    tls.clientCertificate = .init(certificateChainFile: "client.pem", privateKeyFile: "client.key",
                                  privateKeyPassphrase: try TLSPassphrase(contentsOfFile: "client.pass"))
    tls.publicKeyPins = .init(sha256: ["Wj4bYlMN4PtegbnyLmz/B0dJ7V9lqPHDEGVWLkwb+sc="])  // and the chain
    let endpoint = try WebSocketURLEndpoint(url: "wss://feed.example.com/v1/ws",
                                            headers: [("Cookie", "sid=4f2a")], tls: tls,
                                            proxy: try ProxyConfiguration(url: "http://proxy.corp:3128"))
    let socket = SocketAdapter()
    let lines = try await socket.connect(to: endpoint)
    print(await socket.currentConnection?.setCookies ?? [])  // the 101's Set-Cookie values
    for await line in lines { print(String(decoding: line, as: UTF8.self)) }
}

func serveMutualTLS() async throws {
    var configuration = WebSocketServerConfiguration(host: "0.0.0.0", port: 8443)
    configuration.tls = TLSServerConfiguration(certificateChainFile: "server.pem", privateKeyFile: "server.key",
                                               clientCertificates: .required(trustedCAFile: "clients-ca.pem"))
    let server = WebSocketServer(configuration: configuration)
    server.route("/v1/ws", authenticate: { request in      // the certificate is already verified
        request.clientCertificate?.subject == "CN=alice,O=Example"
            ? .accept(userInfo: ["user": "alice"]) : .forbidden()
    }) { connection in
        try await connection.send(text: "hello \(connection.userInfo["user"] ?? "")\n")
    }
    try await server.run()
}

#if JWTSupport
// "Identity: signed tokens that expire and refresh", verbatim (compiled only).
func serveWithTokens() async throws {
    let jwt = try await JWTAuthenticator(keys: .secretFile("/etc/chat/jwt-secret"))
    let server = WebSocketServer(configuration: .init(host: "127.0.0.1", port: 8080))
    server.route("/v1/ws", authenticate: jwt.authenticate) { connection in
        let user = connection.userInfo["sub"] ?? ""     // closed with 4001 at the token's exp…
        for await line in connection.lines() {
            let text = String(decoding: line, as: UTF8.self)
            if text.hasPrefix("refresh "), let fresh = try? await jwt.verify(String(text.dropFirst(8))),
               fresh.subject == user, let exp = fresh.expiresAt {
                connection.extendAuthentication(until: exp)   // …unless refreshed in-band (same sub)
                continue
            }
            try await connection.send(text: "\(user): \(text)\n")
        }
    }
    try await server.run()
}
#endif

func connectWithTokens(fetchToken: @escaping @Sendable () async throws -> SocketToken) async throws {
    let socket = SocketAdapter(reconnect: ReconnectPolicy(),
                               tokenProvider: fetchToken,              // SocketToken(jwt, expiresAt: exp)
                               refreshCommand: { "refresh \($0.value)" })
    let lines = try await socket.connect(to: ChatEndpoint(port: 8080))
    for await line in lines { print(String(decoding: line, as: UTF8.self)) }
}

@Suite("README examples")
struct ReadmeExamplesTests {
    @Test func readmeCallbackRouteEchoes() async throws {
        let server = WebSocketServer(configuration: .init(host: "127.0.0.1", port: 0))
        addCallbackRoute(to: server)
        let port = try await server.start()
        let adapter = SocketAdapter()
        let messages = try await adapter.connectMessages(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/echo"))
        var iterator = messages.makeAsyncIterator()
        try await adapter.send(text: "ping ✓")
        #expect(await iterator.next() == .text(Array("ping ✓".utf8)))
        await adapter.close()
        await server.shutdown(timeout: .seconds(2))
    }

    @Test func readmeClientTalksToAServer() async throws {
        let server = WebSocketServer()
        let received = ReceivedLines()
        server.route("/v1/ws") { connection in
            for await line in connection.lines() {
                let text = String(decoding: line, as: UTF8.self)
                await received.append(text)
                if text.contains("\"message\"") {
                    try await connection.send(text: "{\"echo\":\(text)}\n{\"done\":\"!\"}\n")
                }
            }
        }
        let port = try await server.start()
        try await chat(port: port)
        let lines = await received.lines
        #expect(lines == [#"{"room":"general","type":"join","user":"alice"}"#,
                          #"{"room":"general","text":"hello","type":"message"}"#])
        await server.shutdown(timeout: .seconds(2))
    }

    @Test func commandsGetExactlyOneTrailingNewline() {
        struct Raw: SocketCommand { var message: String }
        #expect(Raw(message: "a").line == "a\n")
        #expect(Raw(message: "a\n").line == "a\n")
        #expect(Join(room: "r", user: "u").line == #"{"room":"r","type":"join","user":"u"}"# + "\n")
    }
}

actor ReceivedLines {
    var lines: [String] = []
    func append(_ s: String) { lines.append(s) }
}
