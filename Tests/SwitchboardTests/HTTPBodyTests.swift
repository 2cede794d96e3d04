import Foundation
import Testing
@testable import Switchboard
import SwitchboardCore

/// Plain HTTP requests with bodies over real sockets: `WebSocketServer.handleHTTP(_:)`, its
/// limits (411/413/400), the handshake timer over slow bodies (408) and slow handlers (503).
@Suite struct HTTPBodyTests {
    /// The requests a handler saw, and the answer every handler of these tests gives: the
    /// method, the path and the body echoed back.
    final class Seen: Sendable {
        private let requests = Locked<[HTTPRequest]>([])
        var all: [HTTPRequest] { requests.withLock { $0 } }
        var count: Int { requests.withLock { $0.count } }

        @Sendable func echo(_ request: HTTPRequest) async -> HTTPResponse? {
            requests.withLock { $0.append(request) }
            var response = HTTPResponse(status: 200, headers: ["Content-Type": "application/octet-stream",
                                                              "X-Method": request.head.method,
                                                              "X-Path": request.head.path],
                                        body: request.body)
            if request.head.path == "/missing" { return nil }
            if request.head.path == "/created" { response.status = 201 }
            return response
        }
    }

    /// Sends `pieces` one after another (each its own write, `pause` between them) on one
    /// connection and reads the answer.
    static func exchange(port: Int, _ pieces: [[UInt8]], pause: Duration = .zero) async throws
        -> ServerRawSocket.HTTPReply {
        try await onServerTestThread {
            let socket = try ServerRawSocket(port: port)
            for piece in pieces {
                try socket.send(piece)
                if pause > .zero {
                    Thread.sleep(forTimeInterval: Double(pause.components.seconds) + Double(pause.components.attoseconds) / 1e18)
                }
            }
            return try socket.readHTTPResponse()
        }
    }

    static func exchange(port: Int, _ request: String) async throws -> ServerRawSocket.HTTPReply {
        try await exchange(port: port, [Array(request.utf8)])
    }

    static func post(_ path: String = "/echo", body: [UInt8], extra: String = "") -> [UInt8] {
        Array("POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: \(body.count)\r\n\(extra)\r\n".utf8) + body
    }

    static func errorCode(_ reply: ServerRawSocket.HTTPReply) -> String? {
        errorObject(reply.bodyText)?["code"] as? String
    }

    /// `reply` has `status` and the JSON error body `{"error":{"message","type","code"}}`
    /// with the type of its status.
    static func checkError(_ reply: ServerRawSocket.HTTPReply, status: Int, _ what: String,
                           sourceLocation: SourceLocation = #_sourceLocation) {
        let types = [400: "invalid_request_error", 404: "not_found_error", 408: "invalid_request_error",
                     411: "invalid_request_error", 413: "invalid_request_error", 503: "overloaded_error"]
        #expect(reply.status == status, "\(what): \(reply.bodyText)", sourceLocation: sourceLocation)
        #expect(reply.header("Content-Type") == "application/json", "\(what)", sourceLocation: sourceLocation)
        let error = errorObject(reply.bodyText)
        #expect(error.map { Set($0.keys) } == ["message", "type", "code"], "\(what): \(reply.bodyText)",
                sourceLocation: sourceLocation)
        #expect(error?["type"] as? String == types[status], "\(what): \(reply.bodyText)", sourceLocation: sourceLocation)
    }

    static func withBodyServer(_ configure: (inout WebSocketServerConfiguration) -> Void = { _ in },
                               handler: @escaping @Sendable (HTTPRequest) async -> HTTPResponse?,
                               _ body: (WebSocketServer, Int) async throws -> Void) async throws {
        try await withTestServer(configure, setup: { server in
            server.route("/ws", handler: echoHandler)
            server.handleHTTP(handler)
        }, body)
    }

    // MARK: Bodies

    @Test func postEchoesItsBody() async throws {
        let seen = Seen()
        try await Self.withBodyServer(handler: seen.echo) { _, port in
            let body = Array(#"{"user":"ann","text":"héllo ✓"}"#.utf8)
            let reply = try await Self.exchange(port: port, [Self.post("/created", body: body)])
            #expect(reply.status == 201)
            #expect(reply.body == body)
            #expect(reply.header("X-Method") == "POST")
            #expect(reply.header("Connection") == "close")
            #expect(seen.count == 1)
            #expect(seen.all.first?.head.headers["Content-Length"] == "\(body.count)")
        }
    }

    /// A `HEAD` is answered with the head a `GET` would get (its `Content-Length` included) and
    /// no body (RFC 9110 §9.3.2): bytes after the head would be read by a keep-alive client as
    /// the start of its next response. Also for the 404 of a path nobody handles.
    @Test func headGetsTheHeadOfGetWithoutItsBody() async throws {
        let page = Array("<p>hello</p>".utf8)
        let handler: @Sendable (HTTPRequest) async -> HTTPResponse? = { request in
            request.head.path == "/missing" ? nil
                : HTTPResponse(status: 200, headers: ["Content-Type": "text/html"], body: page)
        }
        try await Self.withBodyServer(handler: handler) { _, port in
            let get = try await Self.exchange(port: port, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            #expect(get.status == 200 && get.body == page)
            for (path, status) in [("/", 200), ("/missing", 404)] {
                let raw = try await onServerTestThread {
                    let socket = try ServerRawSocket(port: port)
                    try socket.send(Array("HEAD \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8))
                    return try socket.readToEOF()
                }
                let text = String(decoding: raw, as: UTF8.self)
                let parts = text.components(separatedBy: "\r\n\r\n")
                #expect(parts.count == 2, "HEAD \(path): \(text)")
                #expect(parts.first?.hasPrefix("HTTP/1.1 \(status) ") == true, "HEAD \(path): \(text)")
                #expect(parts.last == "", "HEAD \(path) carried a body: \(text)")
                if path == "/" { #expect(parts.first?.contains("Content-Length: \(page.count)") == true, "\(text)") }
            }
        }
    }

    @Test func aBodySplitOverManyWritesArrivesWhole() async throws {
        let seen = Seen()
        try await Self.withBodyServer(handler: seen.echo) { _, port in
            let body = (0..<5_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
            let request = Self.post(body: body)
            // The head in three pieces, then the body in pieces of 97 bytes.
            var pieces = [Array(request[..<10]), Array(request[10..<30]), Array(request[30..<(request.count - body.count)])]
            var index = request.count - body.count
            while index < request.count {
                let end = min(index + 97, request.count)
                pieces.append(Array(request[index..<end]))
                index = end
            }
            let reply = try await Self.exchange(port: port, pieces, pause: .milliseconds(1))
            #expect(reply.status == 200)
            #expect(reply.body == body)
            #expect(seen.all.first?.body == body)
        }
    }

    @Test func bytesAfterTheBodyAreIgnored() async throws {
        let seen = Seen()
        try await Self.withBodyServer(handler: seen.echo) { _, port in
            let reply = try await Self.exchange(port: port, [Self.post(body: Array("abc".utf8)) + Array("GET / HTTP/1.1\r\n\r\n".utf8)])
            #expect(reply.status == 200)
            #expect(reply.bodyText == "abc")
            #expect(seen.count == 1)
        }
    }

    @Test func exactlyTheLimitIsReadOneMoreIsRefusedBeforeTheHandler() async throws {
        let seen = Seen()
        try await Self.withBodyServer({ $0.maxHTTPBodySize = 1_000 }, handler: seen.echo) { _, port in
            let atLimit = [UInt8](repeating: UInt8(ascii: "a"), count: 1_000)
            let ok = try await Self.exchange(port: port, [Self.post(body: atLimit)])
            #expect(ok.status == 200)
            #expect(ok.body == atLimit)
            let over = try await Self.exchange(port: port, [Self.post(body: atLimit + [UInt8(ascii: "b")])])
            Self.checkError(over, status: 413, "limit + 1")
            #expect(Self.errorCode(over) == "body_too_large")
            #expect(seen.count == 1)
        }
    }

    @Test func theDefaultLimitIs16KiB() async throws {
        let seen = Seen()
        #expect(WebSocketServerConfiguration().maxHTTPBodySize == 16_384)
        try await Self.withBodyServer(handler: seen.echo) { _, port in
            let limit = [UInt8](repeating: UInt8(ascii: "x"), count: 16_384)
            let ok = try await Self.exchange(port: port, [Self.post(body: limit)])
            #expect(ok.status == 200)
            #expect(ok.body.count == 16_384)
            let big = [UInt8](repeating: UInt8(ascii: "x"), count: 17 * 1_024)
            let refused = try await Self.exchange(port: port, [Self.post(body: big)])
            #expect(refused.status == 413)
            #expect(Self.errorCode(refused) == "body_too_large")
            // Announced but never sent: refused from the head alone, at once.
            let announced = try await Self.exchange(
                port: port, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 999999999999\r\n\r\n")
            #expect(announced.status == 413)
            #expect(seen.count == 1)
        }
    }

    /// A client that sends a too-large body after the head reads the 413 and then a clean
    /// close, not a reset: the server reads and drops the announced body before closing.
    @Test func aRefusedBodyIsDrainedSoTheClientSeesA413NotAReset() async throws {
        let seen = Seen()
        try await Self.withBodyServer(handler: seen.echo) { _, port in
            let length = 300_000
            try await onServerTestThread {
                let socket = try ServerRawSocket(port: port)
                try socket.send("POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: \(length)\r\n\r\n")
                let reply = try socket.readHTTPResponse()
                #expect(reply.status == 413)
                // Sent after the answer: a server that had closed at once would reset this
                // connection (the send or the read below fails with ECONNRESET or EPIPE).
                let chunk = [UInt8](repeating: UInt8(ascii: "z"), count: 10_000)
                for _ in 0..<(length / chunk.count) { try socket.send(chunk) }
                #expect(try socket.fill() == false)  // EOF, after the whole body was read
            }
            #expect(seen.count == 0)
        }
    }

    // MARK: Refused framings

    @Test func missingConflictingAndChunkedLengthsAreRefused() async throws {
        let seen = Seen()
        try await Self.withBodyServer(handler: seen.echo) { _, port in
            let cases: [(String, Int, String, String)] = [
                ("POST without length", 411, "length_required",
                 "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nhello"),
                ("PUT without length", 411, "length_required", "PUT /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
                ("chunked", 411, "length_required",
                 "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
                ("chunked with a length", 411, "length_required",
                 "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nhello"),
                ("signed length", 400, "bad_request",
                 "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: +5\r\n\r\nhello"),
                ("conflicting lengths", 400, "bad_request",
                 "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"),
            ]
            for (what, status, code, request) in cases {
                let reply = try await Self.exchange(port: port, request)
                Self.checkError(reply, status: status, what)
                #expect(Self.errorCode(reply) == code, "\(what)")
            }
            #expect(seen.count == 0)
            // Equal repeated lengths are one length.
            let repeated = try await Self.exchange(
                port: port, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5, 5\r\n\r\nhello")
            #expect(repeated.status == 200)
            #expect(repeated.bodyText == "hello")
        }
    }

    // MARK: Time

    @Test func aLyingLengthIsCutAtTheHandshakeTimeoutWith408() async throws {
        let seen = Seen()
        try await Self.withBodyServer({ $0.connection.handshakeTimeout = .milliseconds(300) }, handler: seen.echo) { _, port in
            // Says 100, sends 10, then stalls (the socket stays open): the answer is the event.
            let reply = try await Self.exchange(
                port: port, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n0123456789")
            Self.checkError(reply, status: 408, "lying length")
            #expect(Self.errorCode(reply) == "timeout")
            #expect(seen.count == 0)
        }
    }

    @Test func aHandlerThatOutlivesTheTimeoutGets503AndIsCancelled() async throws {
        let (cancelled, signal) = AsyncStream.makeStream(of: Bool.self)
        try await Self.withBodyServer({ $0.connection.handshakeTimeout = .milliseconds(300) }, handler: { _ in
            try? await Task.sleep(for: .seconds(600))
            signal.yield(Task.isCancelled)
            return .json(status: 200, "{}")  // dropped: the 503 went out already
        }) { _, port in
            let reply = try await Self.exchange(port: port, [Self.post(body: Array("x".utf8))])
            Self.checkError(reply, status: 503, "slow handler")
            #expect(Self.errorCode(reply) == "timeout")
            var iterator = cancelled.makeAsyncIterator()
            #expect(await iterator.next() == true)
        }
    }

    @Test func expectContinueGetsAnInterim100BeforeTheBody() async throws {
        let seen = Seen()
        try await Self.withBodyServer(handler: seen.echo) { _, port in
            let reply = try await onServerTestThread {
                let socket = try ServerRawSocket(port: port)
                try socket.send("POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
                let interim = try socket.readHTTPResponse()
                try socket.send("hello")
                return (interim, try socket.readHTTPResponse())
            }
            #expect(reply.0.status == 100)
            #expect(reply.1.status == 200)
            #expect(reply.1.bodyText == "hello")
        }
    }

    // MARK: Requests without a body, nil, the old handler

    @Test func aGetReachesTheAsyncHandlerWithAnEmptyBody() async throws {
        let seen = Seen()
        try await Self.withBodyServer(handler: seen.echo) { _, port in
            let reply = try await Self.exchange(port: port, "GET /health?x=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            #expect(reply.status == 200)
            #expect(reply.header("X-Method") == "GET")
            #expect(reply.header("X-Path") == "/health")
            #expect(reply.body.isEmpty)
            #expect(seen.all.first?.head.query == "x=1")
            #expect(seen.all.first?.body == [])
        }
    }

    @Test func nilFromTheHandlerIs404() async throws {
        let seen = Seen()
        try await Self.withBodyServer(handler: seen.echo) { _, port in
            let reply = try await Self.exchange(port: port, [Self.post("/missing", body: Array("x".utf8))])
            Self.checkError(reply, status: 404, "nil")
            #expect(seen.count == 1)
        }
    }

    @Test func upgradesStillReachTheirRoutes() async throws {
        try await Self.withBodyServer(handler: { _ in .json(status: 200, "{}") }) { _, port in
            try await onServerTestThread {
                let socket = try ServerRawSocket(port: port)
                try socket.handshake(path: "/ws")
                try socket.send(ServerRawSocket.frame(opcode: 0x1, payload: Array("hi".utf8)))
                let frame = try socket.readFrame()
                #expect(frame.payload == Array("hi".utf8))
            }
        }
    }

    @Test func theSynchronousHandlerStillAnswersAndTheLastHandlerSetWins() async throws {
        try await withTestServer(setup: { server in
            server.handleHTTP { _ in .json(status: 200, #"{"from":"async"}"#) }
            server.onHTTPRequest { head in .json(status: 200, #"{"from":"sync","path":"\#(head.path)"}"#) }
        }) { server, port in
            let reply = try await Self.exchange(port: port, "GET /a HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            #expect(reply.bodyText == #"{"from":"sync","path":"/a"}"#)
            // The synchronous handler sees no body and needs no length: a POST without one is answered.
            let post = try await Self.exchange(port: port, "POST /b HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            #expect(post.bodyText == #"{"from":"sync","path":"/b"}"#)
            server.handleHTTP { request in .json(status: 200, #"{"from":"async","bytes":\#(request.body.count)}"#) }
            let again = try await Self.exchange(port: port, [Self.post("/c", body: Array("1234".utf8))])
            #expect(again.bodyText == #"{"from":"async","bytes":4}"#)
        }
    }

    // MARK: Load

    /// Every request is inside the handler at the same time before any is answered: they are
    /// served concurrently, and all answered.
    @Test func severalHundredConcurrentPostsAreAllAnswered() async throws {
        let count = 300
        let barrier = ArrivalBarrier(count: count)
        // The first request waits in its handler for the last: a timeout with room for a slow
        // (ThreadSanitizer, loaded) machine to connect them all.
        try await Self.withBodyServer({ $0.connection.handshakeTimeout = .seconds(120) }, handler: { request in
            await barrier.arrive()
            return HTTPResponse(status: 200, body: request.body)
        }) { _, port in
            let replies = try await onServerTestThread {
                let sockets = try (0..<count).map { _ in try ServerRawSocket(port: port) }
                for (index, socket) in sockets.enumerated() {
                    try socket.send(Self.post(body: Array("request \(index)".utf8)))
                }
                return try sockets.map { try $0.readHTTPResponse() }
            }
            #expect(replies.count == count)
            for (index, reply) in replies.enumerated() {
                #expect(reply.status == 200, "\(index): \(reply.bodyText)")
                #expect(reply.bodyText == "request \(index)")
            }
        }
    }

    /// Clients that announce a body and stall hold their places in `maxConnections` until
    /// they are answered or gone, like a slow upgrade request; more of them are refused.
    @Test func stalledBodiesCountTowardMaxConnections() async throws {
        let seen = Seen()
        try await Self.withBodyServer({ $0.maxConnections = 3 }, handler: seen.echo) { server, port in
            let refused = try await onServerTestThread {
                let stalled = try (0..<3).map { _ in try ServerRawSocket(port: port) }
                for socket in stalled {
                    try socket.send("POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n0123456789")
                }
                let extra = try ServerRawSocket(port: port)
                try extra.send(Self.post(body: Array("x".utf8)))
                let reply = try extra.readHTTPResponse()
                for socket in stalled { socket.close() }  // gone: their places free up
                return reply
            }
            Self.checkError(refused, status: 503, "beyond maxConnections")
            #expect(await serverEventually { server.counters.sockets.load(ordering: .relaxed) == 0 })
            let after = try await Self.exchange(port: port, [Self.post(body: Array("x".utf8))])
            #expect(after.status == 200)
            #expect(seen.count == 1)
        }
    }

    // MARK: A client nobody here wrote

    @Test func pythonURLLibPostsAndReadsTheAnswers() async throws {
        let seen = Seen()
        try await Self.withBodyServer(handler: seen.echo) { _, port in
            let script = """
                import json, sys, urllib.request, urllib.error
                base = "http://127.0.0.1:%s" % sys.argv[1]
                body = json.dumps({"user": "ann", "text": "h\\u00e9llo"}).encode()
                req = urllib.request.Request(base + "/created", data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=60) as r:
                    print(json.dumps({"status": r.status, "echo": r.read().decode()}))
                try:
                    urllib.request.urlopen(urllib.request.Request(base + "/echo", data=b"x" * 17408, method="POST"), timeout=60)
                    print(json.dumps({"big": "accepted"}))
                except urllib.error.HTTPError as e:
                    print(json.dumps({"big": e.code, "error": json.loads(e.read())["error"]["code"]}))
                try:
                    urllib.request.urlopen(urllib.request.Request(base + "/echo", data=b"y" * (1 << 20), method="POST"), timeout=60)
                    print(json.dumps({"huge": "accepted"}))
                except urllib.error.HTTPError as e:
                    print(json.dumps({"huge": e.code}))
                """
            let output = try await Self.runPython(script, [String(port)])
            let lines = output.split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
            #expect(lines.count == 3, "\(output)")
            #expect(lines.first?["status"] as? Int == 201, "\(output)")
            #expect(lines.first?["echo"] as? String == #"{"user": "ann", "text": "h\u00e9llo"}"#, "\(output)")
            #expect(lines.dropFirst().first?["big"] as? Int == 413, "\(output)")
            #expect(lines.dropFirst().first?["error"] as? String == "body_too_large", "\(output)")
            // 1 MiB sent whole after the head: a 413, not a reset in the middle of the upload.
            #expect(lines.last?["huge"] as? Int == 413, "\(output)")
            #expect(seen.all.first?.head.headers["Content-Type"] == "application/json")
            #expect(seen.count == 1)
        }
    }

    /// The same over TLS: the body is read from decrypted records, and the drained `413` works
    /// there too.
    @Test func pythonURLLibPostsOverTLS() async throws {
        let pki = try TestPKI.get()
        let seen = Seen()
        try await Self.withBodyServer({
            $0.tls = TLSServerConfiguration(certificateChainFile: pki.serverCertificate, privateKeyFile: pki.serverKey)
        }, handler: seen.echo) { _, port in
            let script = """
                import json, ssl, sys, urllib.request, urllib.error
                ctx = ssl.create_default_context(cafile=sys.argv[2])
                base = "https://localhost:%s" % sys.argv[1]
                body = b"0123456789" * 1000
                req = urllib.request.Request(base + "/echo", data=body, method="PUT")
                with urllib.request.urlopen(req, timeout=60, context=ctx) as r:
                    print(json.dumps({"status": r.status, "same": r.read() == body}))
                try:
                    urllib.request.urlopen(urllib.request.Request(base + "/echo", data=b"y" * (1 << 20), method="POST"),
                                           timeout=60, context=ctx)
                    print(json.dumps({"huge": "accepted"}))
                except urllib.error.HTTPError as e:
                    print(json.dumps({"huge": e.code}))
                """
            let output = try await Self.runPython(script, [String(port), pki.caCertificate])
            let lines = output.split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
            #expect(lines.first?["status"] as? Int == 200, "\(output)")
            #expect(lines.first?["same"] as? Bool == true, "\(output)")
            #expect(lines.last?["huge"] as? Int == 413, "\(output)")
            #expect(seen.all.first?.head.method == "PUT")
            #expect(seen.all.first?.body.count == 10_000)
            #expect(seen.count == 1)
        }
    }

    /// Runs `python3 -c script args…` and returns its standard output (standard error is
    /// appended when it fails).
    static func runPython(_ script: String, _ arguments: [String]) async throws -> String {
        try await onServerTestThread {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["python3", "-c", script] + arguments
            let out = Pipe(), err = Pipe()
            process.standardOutput = out
            process.standardError = err
            try process.run()
            let output = out.fileHandleForReading.readDataToEndOfFile()
            let errors = err.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            let text = String(decoding: output, as: UTF8.self)
            return process.terminationStatus == 0 ? text : text + String(decoding: errors, as: UTF8.self)
        }
    }
}

/// Suspends every caller of ``arrive()`` until `count` callers have arrived.
private actor ArrivalBarrier {
    private let count: Int
    private var arrived = 0
    private var waiting: [CheckedContinuation<Void, Never>] = []

    init(count: Int) { self.count = count }

    func arrive() async {
        arrived += 1
        if arrived >= count {
            for continuation in waiting { continuation.resume() }
            waiting = []
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }
}
