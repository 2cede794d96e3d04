import Testing
@testable import SwitchboardCore

private func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

@Suite("RFC 9112 §4–§6 simple responses")
struct HTTPResponseTests {
    @Test func errorBodyIsExactJSON() {
        let response = HTTPResponse.error(status: 403, message: "origin not allowed", type: "forbidden", code: "bad_origin")
        #expect(text(response.body) == #"{"error":{"message":"origin not allowed","type":"forbidden","code":"bad_origin"}}"#)
        #expect(response.headers["Content-Type"] == "application/json")
        #expect(response.reason == "Forbidden")
    }

    @Test func missingCodeIsNull() {
        let response = HTTPResponse.error(status: 503, message: "m", type: "t")
        #expect(text(response.body) == #"{"error":{"message":"m","type":"t","code":null}}"#)
    }

    @Test func jsonStringsAreEscaped() {
        let response = HTTPResponse.error(status: 400, message: "say \"hi\" \\ \n\r\t\u{08}\u{0C}\u{01}\u{1F} é 🎉", type: "q\"", code: "c\\")
        #expect(text(response.body) == #"{"error":{"message":"say \"hi\" \\ \n\r\t\b\f\u0001\u001f é 🎉","type":"q\"","code":"c\\"}}"#)
    }

    @Test func serializationHasContentLengthAndConnectionClose() {
        let response = HTTPResponse.json(status: 404, #"{"a":1}"#)
        #expect(text(response.bytes) == "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 7\r\nConnection: close\r\n\r\n{\"a\":1}")
    }

    @Test func theAnswerToHeadHasTheHeadOfGetAndNoBody() {
        let response = HTTPResponse(status: 200, headers: ["Content-Type": "text/plain"], body: Array("hello".utf8))
        let get = String(decoding: response.bytes(answering: "GET"), as: UTF8.self)
        let head = String(decoding: response.bytes(answering: "HEAD"), as: UTF8.self)
        #expect(get == head + "hello")
        #expect(head.hasSuffix("Content-Length: 5\r\nConnection: close\r\n\r\n"))
        #expect(response.bytes == response.bytes(answering: "GET"))
        #expect(response.bytes(answering: "POST") == response.bytes)
    }

    @Test func headerInjectionIsNeutralized() {
        var response = HTTPResponse(status: 200, headers: ["X-Evil": "a\r\nSet-Cookie: x=1", "Bad Name": "v", "Bad\r\nName": "v", "X-Nul": "a\u{0}b"], body: [UInt8]("ok".utf8))
        response.reason = "OK\r\nInjected: 1"
        let serialized = text(response.bytes)
        #expect(serialized == "HTTP/1.1 200 OK  Injected: 1\r\nX-Evil: a  Set-Cookie: x=1\r\nX-Nul: a b\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
    }

    @Test func callerFramingHeadersAreReplaced() {
        let response = HTTPResponse(status: 200, headers: ["Content-Length": "999", "connection": "keep-alive", "Transfer-Encoding": "chunked"], body: [1, 2])
        #expect(response.bytes == Array("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n".utf8) + [1, 2])
    }

    @Test func responsesThatCannotHaveABodyOmitIt() {
        for status in [101, 204, 304] {
            let response = HTTPResponse(status: status, body: [1, 2, 3])
            #expect(text(response.bytes) == "HTTP/1.1 \(status) \(HTTPResponse.reasonPhrase(for: status))\r\nConnection: close\r\n\r\n")
        }
    }

    @Test func outOfRangeStatusIsSerializedAs500() {
        #expect(text(HTTPResponse(status: 42).bytes).hasPrefix("HTTP/1.1 500 Unknown\r\n"))
        #expect(text(HTTPResponse(status: 1000).bytes).hasPrefix("HTTP/1.1 500 Unknown\r\n"))
        #expect(text(HTTPResponse(status: -1).bytes).hasPrefix("HTTP/1.1 500 "))
    }

    @Test func reasonPhrases() {
        let expected: [Int: String] = [
            100: "Continue", 101: "Switching Protocols", 200: "OK", 201: "Created", 202: "Accepted",
            204: "No Content", 301: "Moved Permanently", 302: "Found", 304: "Not Modified",
            307: "Temporary Redirect", 308: "Permanent Redirect", 400: "Bad Request", 401: "Unauthorized",
            403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
            409: "Conflict", 413: "Content Too Large", 414: "URI Too Long", 426: "Upgrade Required",
            429: "Too Many Requests", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
            501: "Not Implemented", 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout",
            505: "HTTP Version Not Supported", 299: "Unknown",
        ]
        for (status, phrase) in expected { #expect(HTTPResponse.reasonPhrase(for: status) == phrase) }
    }
}
