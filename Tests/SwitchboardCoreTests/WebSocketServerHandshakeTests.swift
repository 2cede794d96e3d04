import Testing
@testable import SwitchboardCore

private let goodFields: [(String, String)] = [
    ("Host", "server.example.com"),
    ("Upgrade", "websocket"),
    ("Connection", "Upgrade"),
    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ("Origin", "http://example.com"),
    ("Sec-WebSocket-Protocol", "chat, superchat"),
    ("Sec-WebSocket-Version", "13"),
]

private func request(method: String = "GET", target: String = "/chat?room=a%20b&x", version: String = "HTTP/1.1", _ fields: [(String, String)] = goodFields) -> HTTPRequestHead {
    HTTPRequestHead(method: method, target: target, version: version, headers: HTTPHeaders(fields))
}

private func replacing(_ name: String, with value: String?) -> [(String, String)] {
    var fields = goodFields.filter { $0.0.lowercased() != name.lowercased() }
    if let value { fields.append((name, value)) }
    return fields
}

private func expectRejection(_ head: HTTPRequestHead, _ expected: WebSocketHandshakeError, status: Int, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(throws: expected, sourceLocation: sourceLocation) { try WebSocketServerHandshake.classify(head) }
    do {
        _ = try WebSocketServerHandshake.classify(head)
    } catch {
        #expect(error.response?.status == status, sourceLocation: sourceLocation)
    }
}

@Suite("RFC 6455 §4.2 server handshake")
struct WebSocketServerHandshakeTests {
    @Test func acceptValueMatchesSection1_3() {
        #expect(WebSocketServerHandshake.acceptValue(forKey: "dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    }

    @Test func validRequestIsAnUpgrade() throws {
        guard case .upgrade(let upgrade) = try WebSocketServerHandshake.classify(request()) else {
            Issue.record("not an upgrade"); return
        }
        #expect(upgrade.key == "dGhlIHNhbXBsZSBub25jZQ==")
        #expect(upgrade.subprotocols == ["chat", "superchat"])
        #expect(upgrade.origin == "http://example.com")
        #expect(upgrade.host == "server.example.com")
        #expect(upgrade.path == "/chat")
        #expect(upgrade.queryItems.map(\.name) == ["room", "x"])
        #expect(upgrade.queryItems.map(\.value) == ["a b", ""])
        #expect(upgrade.headers.count == goodFields.count)
        #expect(upgrade.head == request())
    }

    @Test func tokenMatchingIsCaseInsensitiveAndListAware() throws {
        var fields = replacing("Upgrade", with: "WebSocket")
        fields = fields.filter { $0.0 != "Connection" } + [("connection", "keep-alive"), ("CONNECTION", "UPGRADE")]
        fields.append(("Sec-WebSocket-Version", " 13 ").self)
        fields = fields.filter { !($0.0 == "Sec-WebSocket-Version" && $0.1 == "13") }
        guard case .upgrade = try WebSocketServerHandshake.classify(request(version: "HTTP/2.0", fields)) else {
            Issue.record("not an upgrade"); return
        }
    }

    @Test func requestWithoutUpgradeIsPlainHTTP() throws {
        let plain = request(method: "POST", target: "/metrics", [("Host", "a")])
        #expect(try WebSocketServerHandshake.classify(plain) == .plainHTTP(plain))
        let noUpgrade = request(replacing("Upgrade", with: nil))
        #expect(try WebSocketServerHandshake.classify(noUpgrade) == .plainHTTP(noUpgrade))
    }

    @Test func nonGETUpgradeIs405WithAllow() throws {
        expectRejection(request(method: "POST"), .badMethod, status: 405)
        expectRejection(request(method: "get"), .badMethod, status: 405)
        #expect(WebSocketHandshakeError.badMethod.response?.headers["Allow"] == "GET")
    }

    @Test func httpBefore1_1Is400() {
        expectRejection(request(version: "HTTP/1.0"), .badVersion, status: 400)
        expectRejection(request(version: "HTTP/0.9"), .badVersion, status: 400)
        expectRejection(request(version: "garbage"), .badVersion, status: 400)
    }

    @Test func upgradeWithoutWebsocketIs400() {
        expectRejection(request(replacing("Upgrade", with: "h2c")), .missingUpgrade, status: 400)
        expectRejection(request(replacing("Upgrade", with: "")), .missingUpgrade, status: 400)
    }

    @Test func connectionWithoutUpgradeIs400() {
        expectRejection(request(replacing("Connection", with: "keep-alive")), .missingConnectionUpgrade, status: 400)
        expectRejection(request(replacing("Connection", with: nil)), .missingConnectionUpgrade, status: 400)
    }

    @Test func missingOrDuplicateHostIs400() {
        expectRejection(request(replacing("Host", with: nil)), .missingHost, status: 400)
        expectRejection(request(replacing("Host", with: " ")), .missingHost, status: 400)
        expectRejection(request(goodFields + [("host", "other")]), .missingHost, status: 400)
    }

    @Test func wrongWebSocketVersionIs426WithSupportedVersion() throws {
        for value in ["8", "12", "14", "13, 8", "", nil] as [String?] {
            expectRejection(request(replacing("Sec-WebSocket-Version", with: value)), .unsupportedWebSocketVersion, status: 426)
        }
        expectRejection(request(goodFields + [("Sec-WebSocket-Version", "13")]), .unsupportedWebSocketVersion, status: 426)
        do {
            _ = try WebSocketServerHandshake.classify(request(replacing("Sec-WebSocket-Version", with: "8")))
        } catch {
            let bytes = String(decoding: error.response?.bytes ?? [], as: UTF8.self)
            #expect(bytes.hasPrefix("HTTP/1.1 426 Upgrade Required\r\n"))
            #expect(bytes.contains("\r\nSec-WebSocket-Version: 13\r\n"))
        }
    }

    @Test func keyMustBeBase64OfSixteenBytes() {
        let fifteen = Base64.encode([UInt8](repeating: 7, count: 15))
        let seventeen = Base64.encode([UInt8](repeating: 7, count: 17))
        for value in [fifteen, seventeen, "not base64!", "dGhlIHNhbXBsZSBub25jZQ", "dGhlIHNhbXBsZSBub25jZR==", "", nil] as [String?] {
            expectRejection(request(replacing("Sec-WebSocket-Key", with: value)), .badKey, status: 400)
        }
        expectRejection(request(goodFields + [("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")]), .badKey, status: 400)
    }

    @Test func nonTokenSubprotocolIs400() {
        expectRejection(request(replacing("Sec-WebSocket-Protocol", with: "chat, a b")), .badSubprotocol, status: 400)
        expectRejection(request(replacing("Sec-WebSocket-Protocol", with: "a/b")), .badSubprotocol, status: 400)
    }

    @Test func acceptResponseBytesAreExact() throws {
        guard case .upgrade(let upgrade) = try WebSocketServerHandshake.classify(request()) else { Issue.record("no"); return }
        let bytes = try WebSocketServerHandshake.acceptResponse(for: upgrade, subprotocol: "superchat", extraHeaders: [("Set-Cookie", "a=b")])
        #expect(String(decoding: bytes, as: UTF8.self) == "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nSec-WebSocket-Protocol: superchat\r\nSet-Cookie: a=b\r\n\r\n")
        let plain = try WebSocketServerHandshake.acceptResponse(for: upgrade, subprotocol: nil)
        #expect(String(decoding: plain, as: UTF8.self) == "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
    }

    @Test func acceptResponseRejectsBadArguments() throws {
        guard case .upgrade(let upgrade) = try WebSocketServerHandshake.classify(request()) else { Issue.record("no"); return }
        let bad: [(String?, [(String, String)])] = [
            ("other", []),
            ("Chat", []),
            (nil, [("X", "a\r\nInjected: 1")]),
            (nil, [("X\r\n", "v")]),
            (nil, [("X", "\u{0}")]),
            (nil, [("Sec-WebSocket-Extensions", "permessage-deflate")]),
            (nil, [("connection", "close")]),
        ]
        for (subprotocol, extra) in bad {
            #expect(throws: WebSocketHandshakeError.invalidArgument) {
                try WebSocketServerHandshake.acceptResponse(for: upgrade, subprotocol: subprotocol, extraHeaders: extra)
            }
        }
        // A hand-built request whose "offered" subprotocol is not a token cannot inject either.
        let forged = WebSocketUpgradeRequest(head: request(), key: "dGhlIHNhbXBsZSBub25jZQ==", subprotocols: ["a\r\nX: 1"])
        #expect(throws: WebSocketHandshakeError.invalidArgument) {
            try WebSocketServerHandshake.acceptResponse(for: forged, subprotocol: "a\r\nX: 1")
        }
    }

    @Test func parsedRequestEndToEnd() throws {
        let raw = "GET /chat HTTP/1.1\r\nHost: server.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nOrigin: http://example.com\r\nSec-WebSocket-Protocol: chat, superchat\r\nSec-WebSocket-Version: 13\r\n\r\n"
        var parser = HTTPRequestParser()
        guard case .complete(let head, _) = try parser.parse(Array(raw.utf8)),
              case .upgrade(let upgrade) = try WebSocketServerHandshake.classify(head)
        else { Issue.record("not an upgrade"); return }
        #expect(upgrade.subprotocols == ["chat", "superchat"])
    }
}
