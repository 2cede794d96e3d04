import Testing
@testable import SwitchboardCore

private func b(_ string: String) -> [UInt8] { Array(string.utf8) }

private func parseWhole(_ input: String) throws(HTTPParseError) -> HTTPParseResult<HTTPResponseHead> {
    var parser = HTTPResponseParser()
    return try parser.parse(b(input))
}

@Suite("RFC 9112 §4 response head parsing")
struct HTTPResponseParserTests {
    private let switching = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"

    @Test func parsesA101WithFramesFollowing() throws {
        var parser = HTTPResponseParser()
        let input = b(switching) + [0x81, 0x05] + b("Hello")
        guard case .complete(let head, let consumed) = try parser.parse(input) else { Issue.record("incomplete"); return }
        #expect(consumed == switching.utf8.count)
        #expect(head.version == "HTTP/1.1")
        #expect(head.status == 101)
        #expect(head.reason == "Switching Protocols")
        #expect(head.headers["upgrade"] == "websocket")
    }

    @Test func everySplitPointGivesTheSameResult() throws {
        let input = b(switching) + [0x81, 0x00]
        let headLength = switching.utf8.count
        guard case .complete(let expected, _) = try parseWhole(switching) else { Issue.record("incomplete"); return }
        for split in 0..<headLength {
            var parser = HTTPResponseParser()
            #expect(try parser.parse(Array(input[..<split])) == .needMoreData)
            #expect(try parser.parse(Array(input[split...])) == .complete(expected, consumed: headLength - split), "split \(split)")
        }
    }

    @Test func reasonMayBeEmptyOrMissing() throws {
        #expect(try parseWhole("HTTP/1.1 404 \r\n\r\n") == .complete(HTTPResponseHead(status: 404, reason: ""), consumed: 17))
        #expect(try parseWhole("HTTP/1.1 404\r\n\r\n") == .complete(HTTPResponseHead(status: 404, reason: ""), consumed: 16))
        #expect(try parseWhole("HTTP/1.0 200 Very OK\r\n\r\n") == .complete(HTTPResponseHead(version: "HTTP/1.0", status: 200, reason: "Very OK"), consumed: 24))
    }

    @Test func malformedStatusLinesAreRejected() {
        #expect(throws: HTTPParseError.invalidStatus) { try parseWhole("HTTP/1.1 1O1 Switching\r\n\r\n") }
        #expect(throws: HTTPParseError.invalidStatus) { try parseWhole("HTTP/1.1 10\r\n\r\n") }
        #expect(throws: HTTPParseError.invalidStatus) { try parseWhole("HTTP/1.1 1010 x\r\n\r\n") }
        #expect(throws: HTTPParseError.invalidStatus) { try parseWhole("HTTP/1.1 099 x\r\n\r\n") }
        #expect(throws: HTTPParseError.invalidStatus) { try parseWhole("HTTP/1.1 -11 x\r\n\r\n") }
        #expect(throws: HTTPParseError.invalidStatus) { try parseWhole("HTTP/1.1 \r\n\r\n") }
        #expect(throws: HTTPParseError.malformedStartLine) { try parseWhole("HTTP/1.1\r\n\r\n") }
        #expect(throws: HTTPParseError.invalidVersion) { try parseWhole("HTTP/11 101 x\r\n\r\n") }
        #expect(throws: HTTPParseError.invalidVersion) { try parseWhole("ICY 200 OK\r\n\r\n") }
        #expect(throws: HTTPParseError.malformedStartLine) { try parseWhole("HTTP/1.1 200 O\u{1}K\r\n\r\n") }
    }

    @Test func headerRulesMatchTheRequestParser() {
        #expect(throws: HTTPParseError.obsoleteLineFolding) { try parseWhole("HTTP/1.1 101 x\r\nA: b\r\n c\r\n\r\n") }
        #expect(throws: HTTPParseError.invalidHeaderValue) { try parseWhole("HTTP/1.1 101 x\r\nA: b\u{0}\r\n\r\n") }
        var parser = HTTPResponseParser(limits: HTTPParseLimits(maxHeaderBytes: 10))
        #expect(parser.limits.maxHeaderBytes == 10)
        #expect(throws: HTTPParseError.headTooLarge) { try parser.parse(b("HTTP/1.1 101 Switching")) }
    }

    @Test func unsafeRawBufferEntryPoint() throws {
        var parser = HTTPResponseParser()
        let input = b("HTTP/1.1 403 Forbidden\r\n\r\nbody")
        let result = try input.withUnsafeBytes { buffer throws(HTTPParseError) in try parser.parse(buffer) }
        #expect(result == .complete(HTTPResponseHead(status: 403, reason: "Forbidden"), consumed: input.count - 4))
    }
}
