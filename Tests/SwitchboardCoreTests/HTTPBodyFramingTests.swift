import Testing
@testable import SwitchboardCore

private func b(_ string: String) -> [UInt8] { Array(string.utf8) }

private func head(method: String = "POST", _ fields: [(String, String)]) -> HTTPRequestHead {
    HTTPRequestHead(method: method, target: "/v1/rooms/a/messages", headers: HTTPHeaders(fields))
}

private func decide(method: String = "POST", _ fields: [(String, String)], limit: Int = 16_384)
    throws(HTTPBodyError) -> HTTPBodyFraming {
    try HTTPBodyFraming.decide(head(method: method, fields), limit: limit)
}

/// Parses `request` with the real head parser, decides its framing, and reads the body from
/// what follows the head, fed to the parser and the reader in the two pieces split at `split`.
private func parseAndRead(_ request: [UInt8], split: Int, limit: Int = 16_384) throws -> HTTPRequest? {
    var parser = HTTPRequestParser()
    var reader: HTTPBodyReader?
    var parsed: HTTPRequestHead?
    for piece in [Array(request[..<split]), Array(request[split...])] {
        if var current = reader {
            current.append(piece)
            reader = current
            continue
        }
        guard case .complete(let head, let consumed) = try parser.parse(piece) else { continue }
        parsed = head
        switch try HTTPBodyFraming.decide(head, limit: limit) {
        case .none: return HTTPRequest(head: head)
        case .length(let n):
            var fresh = HTTPBodyReader(length: n)
            fresh.append(piece[consumed...])
            reader = fresh
        }
    }
    guard let parsed, let reader, reader.isComplete else { return nil }
    return HTTPRequest(head: parsed, body: reader.body)
}

@Suite("RFC 9112 §6.3 plain HTTP request bodies by Content-Length")
struct HTTPBodyFramingTests {
    // MARK: Content-Length syntax (RFC 9110 §8.6: 1*DIGIT)

    @Test func aDecimalLengthIsTheBodyLength() throws {
        #expect(try decide([("Content-Length", "0")]) == .length(0))
        #expect(try decide([("Content-Length", "1")]) == .length(1))
        #expect(try decide([("Content-Length", "12345")]) == .length(12_345))
        #expect(try decide([("content-length", "7")]) == .length(7))  // field names are case-insensitive
        #expect(try decide([("Content-Length", "007")]) == .length(7))  // leading zeros are digits
    }

    @Test func anythingButDigitsIsABadRequest() {
        let bad = ["", " ", "+5", "-5", "5 5", "5\t5", "0x10", "1e3", "5.0", "five", "5a", "\u{0661}",  // Arabic-Indic one
                   "５", "9_000", ",", "5,", ",5", "5,,5"]
        for value in bad {
            #expect(throws: HTTPBodyError.invalidContentLength, "\(value.debugDescription)") {
                try decide([("Content-Length", value)])
            }
        }
    }

    @Test func whitespaceAroundAValueIsOptionalWhitespace() throws {
        // The head parser trims field values; list elements are trimmed the same way.
        #expect(try decide([("Content-Length", " 5 ")]) == .length(5))
        #expect(try decide([("Content-Length", "5 ,\t5")]) == .length(5))
    }

    @Test func equalRepeatedValuesAreOneLength() throws {
        #expect(try decide([("Content-Length", "42, 42")]) == .length(42))
        #expect(try decide([("Content-Length", "42"), ("Content-Length", "42")]) == .length(42))
        #expect(try decide([("Content-Length", "42"), ("Content-Length", "042, 42")]) == .length(42))
    }

    @Test func differingValuesAreABadRequest() {
        #expect(throws: HTTPBodyError.invalidContentLength) { try decide([("Content-Length", "42, 43")]) }
        #expect(throws: HTTPBodyError.invalidContentLength) {
            try decide([("Content-Length", "42"), ("Content-Length", "4")])
        }
        // Two differing values both beyond Int are still two differing values.
        #expect(throws: HTTPBodyError.invalidContentLength) {
            try decide([("Content-Length", "99999999999999999999, 5")])
        }
    }

    // MARK: The limit

    @Test func theLimitItselfIsAllowedOneMoreIsTooLarge() throws {
        #expect(try decide([("Content-Length", "16384")]) == .length(16_384))
        #expect(throws: HTTPBodyError.bodyTooLarge) { try decide([("Content-Length", "16385")]) }
        #expect(try decide([("Content-Length", "10")], limit: 10) == .length(10))
        #expect(throws: HTTPBodyError.bodyTooLarge) { try decide([("Content-Length", "11")], limit: 10) }
    }

    @Test func aNegativeLimitAllowsOnlyEmptyBodies() throws {
        #expect(try decide([("Content-Length", "0")], limit: -1) == .length(0))
        #expect(throws: HTTPBodyError.bodyTooLarge) { try decide([("Content-Length", "1")], limit: -1) }
    }

    @Test func numbersBeyondIntAreTooLargeNotACrash() {
        for value in ["9223372036854775807", "9223372036854775808", "18446744073709551616",
                      String(repeating: "9", count: 400)] {
            #expect(throws: HTTPBodyError.bodyTooLarge, "\(value)") { try decide([("Content-Length", value)]) }
        }
        #expect(throws: HTTPBodyError.bodyTooLarge) {
            try decide([("Content-Length", "99999999999999999999, 99999999999999999999")])
        }
    }

    @Test func intMaxIsALengthUnderAnIntMaxLimit() throws {
        #expect(try decide([("Content-Length", "9223372036854775807")], limit: .max) == .length(.max))
    }

    // MARK: Transfer-Encoding and missing lengths

    @Test func anyTransferEncodingIsRefusedWithLengthRequired() {
        for value in ["chunked", "gzip, chunked", "identity", "", "CHUNKED"] {
            #expect(throws: HTTPBodyError.transferEncoding, "\(value)") {
                try decide([("Transfer-Encoding", value)])
            }
            // With a Content-Length too (the request-smuggling combination), and for a GET.
            #expect(throws: HTTPBodyError.transferEncoding) {
                try decide([("Content-Length", "5"), ("Transfer-Encoding", value)])
            }
            #expect(throws: HTTPBodyError.transferEncoding) { try decide(method: "GET", [("transfer-encoding", value)]) }
        }
    }

    @Test func postPutPatchWithoutALengthAreRefused() {
        for method in ["POST", "PUT", "PATCH"] {
            #expect(throws: HTTPBodyError.lengthRequired, "\(method)") { try decide(method: method, [("Host", "a")]) }
        }
    }

    @Test func otherMethodsWithoutALengthHaveNoBody() throws {
        for method in ["GET", "HEAD", "DELETE", "OPTIONS", "post"] {  // methods are case-sensitive
            #expect(try decide(method: method, [("Host", "a")]) == HTTPBodyFraming.none, "\(method)")
        }
        #expect(try decide(method: "DELETE", [("Content-Length", "3")]) == .length(3))
    }

    @Test func errorsCarryStatusCodeAndTheJSONBody() {
        #expect(HTTPBodyError.bodyTooLarge.status == 413)
        #expect(HTTPBodyError.bodyTooLarge.code == "body_too_large")
        #expect(HTTPBodyError.lengthRequired.status == 411)
        #expect(HTTPBodyError.lengthRequired.code == "length_required")
        #expect(HTTPBodyError.transferEncoding.status == 411)
        #expect(HTTPBodyError.transferEncoding.code == "length_required")
        #expect(HTTPBodyError.invalidContentLength.status == 400)
        #expect(HTTPBodyError.invalidContentLength.code == "bad_request")
        let response = HTTPBodyError.bodyTooLarge.response
        #expect(response.status == 413)
        #expect(String(decoding: response.body, as: UTF8.self)
            == #"{"error":{"message":"request body exceeds the size limit","type":"invalid_request_error","code":"body_too_large"}}"#)
        #expect(String(decoding: response.bytes, as: UTF8.self).hasPrefix("HTTP/1.1 413 Content Too Large\r\n"))
        #expect(String(decoding: HTTPBodyError.lengthRequired.response.bytes, as: UTF8.self)
            .hasPrefix("HTTP/1.1 411 "))
    }

    @Test func theAnnouncedLengthIgnoresTheLimit() {
        #expect(HTTPBodyFraming.announcedLength(head([("Content-Length", "20000")])) == 20_000)
        #expect(HTTPBodyFraming.announcedLength(head([("Content-Length", "7, 7")])) == 7)
        #expect(HTTPBodyFraming.announcedLength(head([("Content-Length", "7, 8")])) == nil)
        #expect(HTTPBodyFraming.announcedLength(head([("Content-Length", "-7")])) == nil)
        #expect(HTTPBodyFraming.announcedLength(head([("Content-Length", "99999999999999999999")])) == nil)
        #expect(HTTPBodyFraming.announcedLength(head([("Host", "a")])) == nil)
    }

    @Test func expectContinueIsRecognised() {
        #expect(HTTPBodyFraming.expectsContinue(head([("Expect", "100-continue")])))
        #expect(HTTPBodyFraming.expectsContinue(head([("expect", "100-Continue")])))
        #expect(!HTTPBodyFraming.expectsContinue(head([("Expect", "200-ok")])))
        #expect(!HTTPBodyFraming.expectsContinue(head([("Host", "a")])))
        #expect(HTTPBodyFraming.continueResponse == b("HTTP/1.1 100 Continue\r\n\r\n"))
    }
}

@Suite("Request body reader")
struct HTTPBodyReaderTests {
    @Test func takesExactlyTheLengthAndNoMore() {
        var reader = HTTPBodyReader(length: 5)
        #expect(!reader.isComplete)
        #expect(reader.remaining == 5)
        #expect(reader.append(b("he")) == 2)
        #expect(reader.remaining == 3)
        #expect(reader.append(b("llo, world")) == 3)
        #expect(reader.isComplete)
        #expect(reader.body == b("hello"))
        #expect(reader.append(b("more")) == 0)
        #expect(reader.body == b("hello"))
    }

    @Test func anEmptyBodyIsCompleteAtOnce() {
        var reader = HTTPBodyReader(length: 0)
        #expect(reader.isComplete)
        #expect(reader.append(b("x")) == 0)
        #expect(reader.body.isEmpty)
        #expect(HTTPBodyReader(length: -3).isComplete)
    }

    @Test func storageFollowsTheBytesReceivedNotTheAnnouncedLength() {
        var reader = HTTPBodyReader(length: .max)
        reader.append(b("abc"))
        #expect(reader.body.count == 3)
        #expect(reader.body.capacity < 1_024)
        #expect(!reader.isComplete)
    }

    @Test func oneByteAtATime() {
        let body = (0..<300).map { UInt8(truncatingIfNeeded: $0) }
        var reader = HTTPBodyReader(length: body.count)
        for (index, byte) in body.enumerated() {
            #expect(!reader.isComplete, "before byte \(index)")
            #expect(reader.append([byte]) == 1)
        }
        #expect(reader.isComplete)
        #expect(reader.body == body)
    }

    @Test func aWholeRequestAtEverySplitPoint() throws {
        let request = b("POST /v1/rooms/a/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 13\r\n\r\n{\"text\":\"hi\"}")
            + b("GARBAGE AFTER THE BODY")
        for split in 0...request.count {
            let parsed = try parseAndRead(request, split: split)
            #expect(parsed?.body == b("{\"text\":\"hi\"}"), "split \(split)")
            #expect(parsed?.head.method == "POST", "split \(split)")
        }
    }

    @Test func aRequestWithoutABodyAtEverySplitPoint() throws {
        let request = b("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        for split in 0...request.count {
            let parsed = try parseAndRead(request, split: split)
            #expect(parsed == HTTPRequest(head: HTTPRequestHead(method: "GET", target: "/metrics",
                                                               headers: ["Host": "x"])), "split \(split)")
        }
    }

    @Test func anIncompleteBodyIsNeverComplete() throws {
        let request = b("PUT /x HTTP/1.1\r\nContent-Length: 100\r\n\r\n") + b(String(repeating: "a", count: 99))
        for split in 0...request.count {
            #expect(try parseAndRead(request, split: split) == nil, "split \(split)")
        }
    }
}
