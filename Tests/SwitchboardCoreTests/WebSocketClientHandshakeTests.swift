import Testing
@testable import SwitchboardCore

private let sampleKey = Array("the sample nonce".utf8) // RFC 6455 §1.3: base64 is dGhlIHNhbXBsZSBub25jZQ==

private func response(status: Int = 101, _ fields: [(String, String)]) -> HTTPResponseHead {
    HTTPResponseHead(status: status, reason: "", headers: HTTPHeaders(fields))
}

private let goodFields: [(String, String)] = [
    ("UPGRADE", "WebSocket"),
    ("Connection", "keep-alive, Upgrade"),
    ("Sec-WebSocket-Accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
]

private func replacing(_ name: String, with value: String?) -> [(String, String)] {
    var fields = goodFields.filter { $0.0.lowercased() != name.lowercased() }
    if let value { fields.append((name, value)) }
    return fields
}

@Suite("RFC 6455 §4.1 client handshake")
struct WebSocketClientHandshakeTests {
    @Test func keyAndExpectedAcceptMatchTheRFCExample() throws {
        let handshake = try WebSocketClientHandshake(host: "server.example.com", path: "/chat", key: sampleKey)
        #expect(handshake.keyBase64 == "dGhlIHNhbXBsZSBub25jZQ==")
        #expect(handshake.expectedAccept == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    }

    @Test func requestBytesAreExact() throws {
        let handshake = try WebSocketClientHandshake(
            host: "server.example.com:8080", path: "/chat?room=a%20b", key: sampleKey,
            origin: "http://example.com", subprotocols: ["chat", "superchat"],
            extraHeaders: [("Authorization", "Bearer abc"), ("X-Empty", "")])
        let expected = "GET /chat?room=a%20b HTTP/1.1\r\n"
            + "Host: server.example.com:8080\r\n"
            + "Upgrade: websocket\r\n"
            + "Connection: Upgrade\r\n"
            + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            + "Sec-WebSocket-Version: 13\r\n"
            + "Origin: http://example.com\r\n"
            + "Sec-WebSocket-Protocol: chat, superchat\r\n"
            + "Authorization: Bearer abc\r\n"
            + "X-Empty: \r\n"
            + "\r\n"
        #expect(String(decoding: handshake.requestBytes, as: UTF8.self) == expected)
        #expect(handshake.subprotocols == ["chat", "superchat"])
        #expect(handshake.origin == "http://example.com")
        #expect(handshake.host == "server.example.com:8080")
        #expect(handshake.path == "/chat?room=a%20b")
    }

    @Test func minimalRequestOmitsOptionalFields() throws {
        let handshake = try WebSocketClientHandshake(host: "h", path: "/", key: sampleKey)
        #expect(String(decoding: handshake.requestBytes, as: UTF8.self) == "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    }

    @Test func requestIsAcceptedByOurOwnServerSide() throws {
        let handshake = try WebSocketClientHandshake(host: "h", path: "/x?y=1", key: sampleKey, subprotocols: ["a"])
        var parser = HTTPRequestParser()
        guard case .complete(let head, _) = try parser.parse(handshake.requestBytes),
              case .upgrade(let request) = try WebSocketServerHandshake.classify(head)
        else { Issue.record("not an upgrade"); return }
        let accept = try WebSocketServerHandshake.acceptResponse(for: request, subprotocol: "a")
        var responseParser = HTTPResponseParser()
        guard case .complete(let responseHead, _) = try responseParser.parse(accept) else { Issue.record("incomplete"); return }
        #expect(try handshake.validate(responseHead) == "a")
    }

    @Test func validateAcceptsAGood101() throws {
        let handshake = try WebSocketClientHandshake(host: "h", path: "/", key: sampleKey)
        #expect(try handshake.validate(response(goodFields)) == nil)
        #expect(try handshake.validate(response(replacing("Sec-WebSocket-Extensions", with: " "))) == nil)
    }

    @Test func nonSwitchingStatusIsRejectedWithThatStatus() throws {
        let handshake = try WebSocketClientHandshake(host: "h", path: "/", key: sampleKey)
        for status in [200, 403, 426, 500] {
            #expect(throws: WebSocketHandshakeError.rejected(status: status)) { try handshake.validate(response(status: status, goodFields)) }
            do {
                _ = try handshake.validate(response(status: status, goodFields))
            } catch {
                #expect(error.status == status)
            }
        }
    }

    @Test func upgradeMustBeWebsocket() throws {
        let handshake = try WebSocketClientHandshake(host: "h", path: "/", key: sampleKey)
        for value in [nil, "h2c", "websocket, h2c", ""] as [String?] {
            #expect(throws: WebSocketHandshakeError.missingUpgrade) { try handshake.validate(response(replacing("Upgrade", with: value))) }
        }
    }

    @Test func connectionMustContainUpgrade() throws {
        let handshake = try WebSocketClientHandshake(host: "h", path: "/", key: sampleKey)
        for value in [nil, "keep-alive", "upgraded", ""] as [String?] {
            #expect(throws: WebSocketHandshakeError.missingConnectionUpgrade) { try handshake.validate(response(replacing("Connection", with: value))) }
        }
    }

    @Test func acceptMustMatchExactly() throws {
        let handshake = try WebSocketClientHandshake(host: "h", path: "/", key: sampleKey)
        for value in [nil, "S3pPLMBiTxaQ9kYGzzhZRbK+xOo=", "dGhlIHNhbXBsZSBub25jZQ==", ""] as [String?] {
            #expect(throws: WebSocketHandshakeError.badAccept) { try handshake.validate(response(replacing("Sec-WebSocket-Accept", with: value))) }
        }
        let duplicated = goodFields + [("Sec-WebSocket-Accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")]
        #expect(throws: WebSocketHandshakeError.badAccept) { try handshake.validate(response(duplicated)) }
    }

    @Test func subprotocolMustBeOneWeOffered() throws {
        let handshake = try WebSocketClientHandshake(host: "h", path: "/", key: sampleKey, subprotocols: ["chat", "v2.json"])
        #expect(try handshake.validate(response(goodFields + [("Sec-WebSocket-Protocol", "v2.json")])) == "v2.json")
        for value in ["other", "Chat", "chat, v2.json"] {
            #expect(throws: WebSocketHandshakeError.unexpectedSubprotocol) { try handshake.validate(response(goodFields + [("Sec-WebSocket-Protocol", value)])) }
        }
        let twoFields = goodFields + [("Sec-WebSocket-Protocol", "chat"), ("Sec-WebSocket-Protocol", "chat")]
        #expect(throws: WebSocketHandshakeError.unexpectedSubprotocol) { try handshake.validate(response(twoFields)) }
        let none = try WebSocketClientHandshake(host: "h", path: "/", key: sampleKey)
        #expect(throws: WebSocketHandshakeError.unexpectedSubprotocol) { try none.validate(response(goodFields + [("Sec-WebSocket-Protocol", "chat")])) }
    }

    @Test func anyExtensionIsRejected() throws {
        let handshake = try WebSocketClientHandshake(host: "h", path: "/", key: sampleKey)
        #expect(throws: WebSocketHandshakeError.unexpectedExtension) { try handshake.validate(response(goodFields + [("Sec-WebSocket-Extensions", "permessage-deflate")])) }
    }

    @Test func invalidArgumentsAreRejected() {
        func rejects(host: String = "h", path: String = "/", key: [UInt8] = sampleKey, origin: String? = nil,
                     subprotocols: [String] = [], extra: [(String, String)] = [], sourceLocation: SourceLocation = #_sourceLocation) {
            #expect(throws: WebSocketHandshakeError.invalidArgument, sourceLocation: sourceLocation) {
                try WebSocketClientHandshake(host: host, path: path, key: key, origin: origin, subprotocols: subprotocols, extraHeaders: extra)
            }
        }
        // Host
        rejects(host: "")
        rejects(host: "h\r\nX: 1")
        rejects(host: "a b")
        // Path
        rejects(path: "")
        rejects(path: "chat")
        rejects(path: "/a b")
        rejects(path: "/a\r\nX: 1")
        rejects(path: "/a\u{0}")
        rejects(path: "/é")
        // Key
        rejects(key: Array(sampleKey.prefix(15)))
        rejects(key: sampleKey + [0])
        rejects(key: [])
        // Origin
        rejects(origin: "http://a\r\nX: 1")
        rejects(origin: "http://a\n")
        rejects(origin: "http://a\u{0}")
        // Subprotocols
        rejects(subprotocols: ["a b"])
        rejects(subprotocols: [""])
        rejects(subprotocols: ["a,b"])
        rejects(subprotocols: ["chat", "chat"])
        // Extra headers
        rejects(extra: [("X-Ok", "a\r\nInjected: 1")])
        rejects(extra: [("X-Ok", "a\nb")])
        rejects(extra: [("X-Ok", "a\u{0}")])
        rejects(extra: [("X\r\nInjected", "v")])
        rejects(extra: [("X Bad", "v")])
        rejects(extra: [("", "v")])
        rejects(extra: [("host", "evil")])
        rejects(extra: [("Sec-WebSocket-Extensions", "permessage-deflate")])
        rejects(extra: [("Origin", "x")])
    }

    @Test func tabsAndNonASCIIAreAllowedInValues() throws {
        let handshake = try WebSocketClientHandshake(host: "h", path: "/", key: sampleKey, origin: "null", extraHeaders: [("X-Name", "a\tJürgen")])
        #expect(String(decoding: handshake.requestBytes, as: UTF8.self).contains("X-Name: a\tJürgen\r\n"))
    }
}
