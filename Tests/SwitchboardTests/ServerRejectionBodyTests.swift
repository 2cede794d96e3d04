import Foundation
import Testing
@testable import Switchboard
import SwitchboardCore

extension ServerInterop {
/// Every way the server refuses a connection answers with the one error body
/// `{"error":{"message","type","code"}}` and the type the status calls for.
@Suite struct ServerRejectionBodyTests {
    /// The type each rejection status must carry (``HTTPErrorType``'s table).
    static let expectedType: [Int: HTTPErrorType] = [
        400: .invalidRequest, 405: .invalidRequest, 408: .invalidRequest, 426: .invalidRequest, 431: .invalidRequest,
        401: .authentication, 403: .permission, 404: .notFound, 503: .overloaded,
    ]

    /// Sends `request` (as is) and reads the rejection.
    static func reply(port: Int, _ request: String, timeout: Double = 60) async throws -> ServerRawSocket.HTTPReply {
        try await onServerTestThread {
            let s = try ServerRawSocket(port: port, timeout: timeout)
            try s.send(request)
            return try s.readHTTPResponse()
        }
    }

    static func checkBody(_ reply: ServerRawSocket.HTTPReply, status: Int, _ what: String,
                          sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(reply.status == status, "\(what): \(reply.status) \(reply.bodyText)", sourceLocation: sourceLocation)
        #expect(reply.header("Content-Type") == "application/json", "\(what)", sourceLocation: sourceLocation)
        let top = try #require(try JSONSerialization.jsonObject(with: Data(reply.body)) as? [String: Any],
                               "\(what): \(reply.bodyText)", sourceLocation: sourceLocation)
        #expect(Set(top.keys) == ["error"], "\(what)", sourceLocation: sourceLocation)
        let error = try #require(top["error"] as? [String: Any], "\(what)", sourceLocation: sourceLocation)
        #expect(Set(error.keys) == ["message", "type", "code"], "\(what): \(reply.bodyText)",
                sourceLocation: sourceLocation)
        #expect(error["message"] is String, "\(what)", sourceLocation: sourceLocation)
        #expect(error["code"] is String || error["code"] is NSNull, "\(what)", sourceLocation: sourceLocation)
        #expect(error["type"] as? String == expectedType[status]?.rawValue, "\(what): \(reply.bodyText)",
                sourceLocation: sourceLocation)
    }

    @Test func handshakeAndRoutingRejections() async throws {
        try await withTestServer({ $0.originPolicy = .exactly(["https://good.example"]) }, setup: { server in
            server.route("/echo", handler: echoHandler)
            server.route("/closed", authenticate: { _ in .unauthorized() }, handler: echoHandler)
            server.route("/private", authenticate: { _ in .forbidden() }, handler: echoHandler)
        }) { _, port in
            let upgrade = ServerRawSocket.upgradeRequest
            let cases: [(String, Int, String)] = [
                ("malformed start line", 400, "GET\r\n\r\n"),
                ("header without colon", 400, "GET /echo HTTP/1.1\r\nHost 127.0.0.1\r\n\r\n"),
                ("too many fields", 431, "GET /echo HTTP/1.1\r\nHost: h\r\n"
                    + (0..<200).map { "X-\($0): v\r\n" }.joined() + "\r\n"),
                ("POST upgrade", 405, upgrade("/echo", "13", []).replacingOccurrences(of: "GET ", with: "POST ")),
                ("missing key", 400, upgrade("/echo", "13", []).replacingOccurrences(
                    of: "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", with: "")),
                ("version 8", 426, upgrade("/echo", "8", [])),
                ("unknown WebSocket route", 404, upgrade("/nowhere", "13", [])),
                ("plain GET", 404, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
                ("bad origin", 403, upgrade("/echo", "13", ["Origin: https://evil.example"])),
                ("unauthorized hook", 401, upgrade("/closed", "13", [])),
                ("forbidden hook", 403, upgrade("/private", "13", [])),
            ]
            for (what, status, request) in cases {
                try Self.checkBody(try await Self.reply(port: port, request), status: status, what)
            }
        }
    }

    @Test func timeoutAndCapacityRejections() async throws {
        try await withTestServer({ $0.connection.handshakeTimeout = .milliseconds(300) },
                                 setup: { $0.route("/echo", handler: echoHandler) }) { _, port in
            let half = "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n"  // never finished
            try Self.checkBody(try await Self.reply(port: port, half), status: 408, "handshake timeout")
        }
        try await withTestServer({ $0.maxConnections = 0 }, setup: { $0.route("/echo", handler: echoHandler) }) { _, port in
            try Self.checkBody(try await Self.reply(port: port, ServerRawSocket.upgradeRequest(path: "/echo")),
                               status: 503, "at capacity")
        }
    }
}
}
