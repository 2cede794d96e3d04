import Testing
@testable import SwitchboardCore

private func b(_ string: String) -> [UInt8] { Array(string.utf8) }

private let upgradeHead = "GET /chat?room=1 HTTP/1.1\r\nHost: server.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"

/// Parses `input` in one go; returns the head and consumed count, or the error.
private func parseWhole(_ input: [UInt8], limits: HTTPParseLimits = .default) throws(HTTPParseError) -> HTTPParseResult<HTTPRequestHead> {
    var parser = HTTPRequestParser(limits: limits)
    return try parser.parse(input)
}

private func expectRejected(_ input: String, _ expected: HTTPParseError, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(throws: expected, "\(input.debugDescription)", sourceLocation: sourceLocation) { try parseWhole(b(input)) }
}

@Suite("RFC 9112 §2–§5 request head parsing")
struct HTTPRequestParserTests {
    @Test func parsesAnUpgradeRequest() throws {
        guard case .complete(let head, let consumed) = try parseWhole(b(upgradeHead)) else {
            Issue.record("incomplete"); return
        }
        #expect(consumed == upgradeHead.utf8.count)
        #expect(head.method == "GET")
        #expect(head.target == "/chat?room=1")
        #expect(head.version == "HTTP/1.1")
        #expect(head.headers.count == 5)
        #expect(head.headers["sec-websocket-key"] == "dGhlIHNhbXBsZSBub25jZQ==")
    }

    @Test func consumedStopsExactlyAtTheEndOfTheHead() throws {
        let frame: [UInt8] = [0x81, 0x05] + b("Hello")
        let result = try parseWhole(b(upgradeHead) + frame)
        guard case .complete(_, let consumed) = result else { Issue.record("incomplete"); return }
        #expect(consumed == upgradeHead.utf8.count)
    }

    @Test func everySplitPointGivesTheSameResult() throws {
        let input = b(upgradeHead) + [0x81, 0x05] + b("Hello")
        let headLength = upgradeHead.utf8.count
        guard case .complete(let expected, _) = try parseWhole(input) else { Issue.record("incomplete"); return }
        for split in 0...input.count {
            var parser = HTTPRequestParser()
            let first = try parser.parse(Array(input[..<split]))
            if split >= headLength {
                #expect(first == .complete(expected, consumed: headLength), "split \(split)")
                continue
            }
            #expect(first == .needMoreData, "split \(split)")
            let second = try parser.parse(Array(input[split...]))
            #expect(second == .complete(expected, consumed: headLength - split), "split \(split)")
        }
    }

    @Test func byteAtATimeCompletesOnTheFinalLF() throws {
        var parser = HTTPRequestParser()
        let input = b(upgradeHead)
        for (index, byte) in input.enumerated() {
            let result = try parser.parse([byte])
            if index == input.count - 1 {
                guard case .complete(let head, consumed: 1) = result else { Issue.record("not complete"); return }
                #expect(head.headers.count == 5)
            } else {
                #expect(result == .needMoreData)
            }
        }
    }

    @Test func emptyChunkNeedsMoreData() throws {
        var parser = HTTPRequestParser()
        #expect(try parser.parse([]) == .needMoreData)
    }

    @Test func bareLFIsAcceptedAsLineTerminator() throws {
        let input = "GET / HTTP/1.1\nHost: a\r\nX: y\n\n"
        #expect(try parseWhole(b(input)) == .complete(HTTPRequestHead(method: "GET", target: "/", headers: ["Host": "a", "X": "y"]), consumed: input.utf8.count))
    }

    @Test func leadingEmptyLinesAreIgnored() throws {
        let input = "\r\n\nGET / HTTP/1.1\r\n\r\n"
        #expect(try parseWhole(b(input)) == .complete(HTTPRequestHead(method: "GET", target: "/"), consumed: input.utf8.count))
    }

    @Test func parserResetsAfterCompletionForTheNextHead() throws {
        var parser = HTTPRequestParser()
        let input = b("GET /a HTTP/1.1\r\n\r\n")
        guard case .complete(let first, _) = try parser.parse(input),
              case .complete(let second, _) = try parser.parse(b("GET /b HTTP/1.0\r\nA: 1\r\n\r\n"))
        else { Issue.record("incomplete"); return }
        #expect(first.target == "/a")
        #expect(second.target == "/b")
        #expect(second.headers.count == 1)
    }

    @Test func valueWhitespaceIsTrimmedAndInnerWhitespaceKept() throws {
        guard case .complete(let head, _) = try parseWhole(b("GET / HTTP/1.1\r\nA: \t x \t y \t\r\nB:\r\nC:z\r\n\r\n")) else {
            Issue.record("incomplete"); return
        }
        #expect(head.headers.values(for: "A") == ["x \t y"])
        #expect(head.headers["B"] == "")
        #expect(head.headers["C"] == "z")
    }

    @Test func obsTextInValuesIsAccepted() throws {
        var input = b("GET / HTTP/1.1\r\nU: caf")
        input += [0xC3, 0xA9] // UTF-8 é
        input += b("\r\nL: caf")
        input += [0xE9] // ISO-8859-1 é, not UTF-8
        input += b("\r\n\r\n")
        guard case .complete(let head, _) = try parseWhole(input) else { Issue.record("incomplete"); return }
        #expect(head.headers["U"] == "café")
        #expect(head.headers["L"] == "café")
    }

    @Test func controlCharactersInValuesAreRejected() {
        for control: UInt8 in [0x00, 0x01, 0x0B, 0x1F, 0x7F] {
            let input = b("GET / HTTP/1.1\r\nX: a") + [control] + b("b\r\n\r\n")
            #expect(throws: HTTPParseError.invalidHeaderValue, "byte \(control)") { try parseWhole(input) }
        }
    }

    @Test func bareCRIsRejected() {
        expectRejected("GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", .bareCarriageReturn)
        expectRejected("GET / HTTP/1.1\r\r\n\r\n", .bareCarriageReturn)
        expectRejected("GET / HTTP/1.1\r\nX: a\r\r\n\r\n", .bareCarriageReturn)
    }

    @Test func malformedHeaderLinesAreRejected() {
        expectRejected("GET / HTTP/1.1\r\nNoColon\r\n\r\n", .malformedHeaderLine)
        expectRejected("GET / HTTP/1.1\r\nHost : a\r\n\r\n", .invalidHeaderName)
        expectRejected("GET / HTTP/1.1\r\n: a\r\n\r\n", .invalidHeaderName)
        expectRejected("GET / HTTP/1.1\r\nBad(Name): a\r\n\r\n", .invalidHeaderName)
        expectRejected("GET / HTTP/1.1\r\nA: 1\r\n folded\r\n\r\n", .obsoleteLineFolding)
        expectRejected("GET / HTTP/1.1\r\nA: 1\r\n\tfolded\r\n\r\n", .obsoleteLineFolding)
    }

    @Test func malformedRequestLinesAreRejected() {
        for line in ["GET /", "GET  / HTTP/1.1", "GET / HTTP/1.1 ", " GET / HTTP/1.1", "GET / HTTP/1.1 x",
                     "G(T / HTTP/1.1", "GET /a\u{7F} HTTP/1.1", "GET /é HTTP/1.1", "GET\t/ HTTP/1.1"] {
            expectRejected(line + "\r\n\r\n", .malformedStartLine)
        }
        for version in ["HTTP/1", "HTTP/1.1.1", "http/1.1", "HTTP/a.1", "HTTP/1.x", "HTTPS/1.1", "HTTP-1.1"] {
            expectRejected("GET / \(version)\r\n\r\n", .invalidVersion)
        }
    }

    @Test func headLargerThanTheLimitIsRejectedWith431BeforeTheFloodEnds() throws {
        var parser = HTTPRequestParser(limits: HTTPParseLimits(maxHeaderBytes: 64))
        #expect(try parser.parse(b("GET / HTTP/1.1\r\n")) == .needMoreData)
        // A header line that never ends: rejected as soon as the buffered head passes 64 bytes.
        #expect(try parser.parse(b("X: " + String(repeating: "a", count: 40))) == .needMoreData)
        #expect(throws: HTTPParseError.headTooLarge) { try parser.parse(b(String(repeating: "a", count: 10))) }
        // The parser stays failed.
        #expect(throws: HTTPParseError.headTooLarge) { try parser.parse(b("\r\n\r\n")) }
        #expect(HTTPParseError.headTooLarge.status == 431)
    }

    @Test func headExactlyAtTheLimitIsAccepted() throws {
        let input = b("GET / HTTP/1.1\r\n\r\n")
        #expect(try parseWhole(input, limits: HTTPParseLimits(maxHeaderBytes: input.count)) == .complete(HTTPRequestHead(method: "GET", target: "/"), consumed: input.count))
        #expect(throws: HTTPParseError.headTooLarge) { try parseWhole(input, limits: HTTPParseLimits(maxHeaderBytes: input.count - 1)) }
        // A complete line that crosses the limit inside one chunk is rejected too.
        #expect(throws: HTTPParseError.headTooLarge) { try parseWhole(b("GET / HTTP/1.1\r\nX: 1\r\n\r\n"), limits: HTTPParseLimits(maxHeaderBytes: 20)) }
    }

    @Test func bytesAfterTheHeadDoNotCountTowardTheLimit() throws {
        let head = b("GET / HTTP/1.1\r\n\r\n")
        let result = try parseWhole(head + [UInt8](repeating: 0x81, count: 1000), limits: HTTPParseLimits(maxHeaderBytes: head.count))
        #expect(result == .complete(HTTPRequestHead(method: "GET", target: "/"), consumed: head.count))
    }

    @Test func tooManyHeadersIsRejectedWith431() throws {
        var input = "GET / HTTP/1.1\r\n"
        for i in 0..<3 { input += "X-\(i): v\r\n" }
        #expect(throws: Never.self) { try parseWhole(b(input + "\r\n"), limits: HTTPParseLimits(maxHeaderCount: 3)) }
        // Detected on the 4th field, before the head ends.
        var parser = HTTPRequestParser(limits: HTTPParseLimits(maxHeaderCount: 3))
        #expect(throws: HTTPParseError.tooManyHeaders) { try parser.parse(b(input + "X-3: v\r\n")) }
        #expect(HTTPParseError.tooManyHeaders.status == 431)
    }

    @Test func negativeLimitsAreClampedToZero() {
        let limits = HTTPParseLimits(maxHeaderBytes: -1, maxHeaderCount: -5)
        #expect(limits.maxHeaderBytes == 0)
        #expect(limits.maxHeaderCount == 0)
        #expect(HTTPRequestParser(limits: limits).limits == limits)
        #expect(throws: HTTPParseError.headTooLarge) { try parseWhole(b("G"), limits: limits) }
    }

    @Test func defaultLimits() {
        #expect(HTTPParseLimits.default.maxHeaderBytes == 16_384)
        #expect(HTTPParseLimits.default.maxHeaderCount == 100)
    }

    @Test func unsafeRawBufferEntryPointMatchesArrayEntryPoint() throws {
        var parser = HTTPRequestParser()
        let input = b(upgradeHead) + [0x81]
        let result = try input.withUnsafeBytes { buffer throws(HTTPParseError) in try parser.parse(buffer) }
        guard case .complete(_, let consumed) = result else { Issue.record("incomplete"); return }
        #expect(consumed == input.count - 1)
    }
}

@Suite("HTTPParseError")
struct HTTPParseErrorTests {
    @Test func syntaxErrorsAre400() {
        for error in [HTTPParseError.malformedStartLine, .invalidVersion, .invalidStatus, .malformedHeaderLine,
                      .obsoleteLineFolding, .invalidHeaderName, .invalidHeaderValue, .bareCarriageReturn] {
            #expect(error.status == 400)
            #expect(error.response.status == 400)
            #expect(!error.description.isEmpty)
        }
    }

    @Test func responseCarriesAJSONBody() {
        let response = HTTPParseError.headTooLarge.response
        #expect(response.status == 431)
        #expect(String(decoding: response.body, as: UTF8.self) == #"{"error":{"message":"HTTP head exceeds the size limit","type":"invalid_request_error","code":"head_too_large"}}"#)
    }
}
