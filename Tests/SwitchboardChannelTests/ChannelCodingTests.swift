import Foundation
import Testing
import SwitchboardChannel
import Switchboard

@Suite("Channel wire format")
struct ChannelCodingTests {
    @Test func decodesEveryEventKind() {
        let cases: [(String, ChannelEvent)] = [
            (#"{"type":"partial","data":{"text":"Hel"}}"#, .partial(text: "Hel")),
            (#"{"type":"assistant","data":{"text":"Hi","model":"m1","stop_reason":"end_turn"}}"#,
             .assistant(text: "Hi", model: "m1", stopReason: "end_turn")),
            (#"{"type":"assistant","data":{"text":"Hi"}}"#, .assistant(text: "Hi", model: nil, stopReason: nil)),
            (#"{"type":"tool_use","data":{"tool_use_id":"t1","name":"grep","input":{"q":"x","n":2,"deep":[true,null,1.5]}}}"#,
             .toolUse(id: "t1", name: "grep", input: ["q": "x", "n": 2, "deep": [true, nil, 1.5]])),
            (#"{"type":"tool_progress","data":{"tool_use_id":"t1","elapsed_seconds":1.25}}"#,
             .toolProgress(id: "t1", elapsedSeconds: 1.25)),
            (#"{"type":"tool_result","data":{"tool_use_id":"t1","content":"ok","is_error":false}}"#,
             .toolResult(id: "t1", content: "ok", isError: false)),
            (#"{"type":"tool_result","data":{"tool_use_id":"t1","content":"denied","is_error":true}}"#,
             .toolResult(id: "t1", content: "denied", isError: true)),
            (#"{"type":"permission_request","data":{"tool_use_id":"t1","name":"rm","input":{"path":"/"}}}"#,
             .permissionRequest(toolUseId: "t1", name: "rm", input: ["path": "/"])),
            (#"{"type":"response","data":{"content":"Assistant response","tokens_used":150}}"#,
             .response(content: "Assistant response", tokensUsed: 150)),
            (#"{"type":"result","data":{"num_turns":2,"duration_ms":812,"total_cost_usd":0.0123,"subtype":"success"}}"#,
             .result(numTurns: 2, durationMs: 812, totalCostUsd: 0.0123, subtype: .success)),
            (#"{"type":"result","data":{"num_turns":1,"duration_ms":5,"total_cost_usd":0,"subtype":"cancelled"}}"#,
             .result(numTurns: 1, durationMs: 5, totalCostUsd: 0, subtype: .cancelled)),
            (#"{"type":"result","data":{"num_turns":1,"duration_ms":5,"total_cost_usd":0,"subtype":"error"}}"#,
             .result(numTurns: 1, durationMs: 5, totalCostUsd: 0, subtype: .error)),
            (#"{"type":"result","data":{"num_turns":1,"duration_ms":5,"total_cost_usd":0,"subtype":"max_turns"}}"#,
             .result(numTurns: 1, durationMs: 5, totalCostUsd: 0, subtype: .other("max_turns"))),
            (#"{"type":"system","data":{"message":"hello"}}"#, .system(message: "hello")),
            (#"{"type":"error","error":{"message":"Invalid request","type":"invalid_request_error","param":"messages","code":"invalid_messages"}}"#,
             .error(message: "Invalid request", type: "invalid_request_error", param: "messages", code: "invalid_messages")),
            (#"{"type":"error","error":{"message":"x","type":"internal_server_error","param":null,"code":500}}"#,
             .error(message: "x", type: "internal_server_error", param: nil, code: "500")),
            (#"{"type":"error","error":{"message":"Rate limit exceeded","type":"rate_limit_error","retry_after":60}}"#,
             .rateLimited(retryAfter: 60)),
            (#"{"type":"error","error":{"message":"slow down","type":"rate_limit_error"}}"#,
             .error(message: "slow down", type: "rate_limit_error", param: nil, code: nil)),
        ]
        for (line, expected) in cases {
            #expect(ChannelEvent(line: line) == expected, "\(line)")
        }
    }

    @Test func unknownTypeKeepsTheRawLine() {
        let line = #"{"type":"thinking","data":{"text":"hmm"}}"#
        #expect(ChannelEvent(line: line) == .unknown(type: "thinking", rawLine: line))
        #expect(ChannelEvent(line: line).type == "thinking")
    }

    @Test func brokenLinesAreReportedNotFatal() {
        for line in [#"{"type":"partial","data":{"text":"unterminated"#, "not json at all", "", "\u{FF}"] {
            guard case .decodingFailed(let raw, let reason) = ChannelEvent(line: line) else {
                Issue.record("expected decodingFailed for \(line.debugDescription)")
                continue
            }
            #expect(raw == line || line == "\u{FF}")
            #expect(reason == "not valid JSON")
        }
        #expect(ChannelEvent(line: "[1,2]") == .decodingFailed(rawLine: "[1,2]", reason: "not a JSON object"))
        #expect(ChannelEvent(line: #"{"data":{}}"#) == .decodingFailed(rawLine: #"{"data":{}}"#, reason: "missing \"type\""))
        let missing = #"{"type":"partial","data":{}}"#
        #expect(ChannelEvent(line: missing) == .decodingFailed(rawLine: missing, reason: "partial: missing string data.text"))
        // Invalid UTF-8 bytes: still an event, never a crash.
        let bytes = Data([0x7B, 0xFF, 0xFE, 0x7D])
        if case .decodingFailed = ChannelEvent(line: bytes) {} else { Issue.record("expected decodingFailed") }
    }

    @Test func encodedEventsDecodeBack() {
        let events: [ChannelEvent] = [
            .partial(text: "a \"quoted\" line\nwith ✓ and \u{1}"),
            .assistant(text: "t", model: "m", stopReason: "end_turn"),
            .assistant(text: "t", model: nil, stopReason: nil),
            .toolUse(id: "1", name: "n", input: ["a": [1, 2.5, "x", nil, false], "b": [:]]),
            .toolProgress(id: "1", elapsedSeconds: 0.125),
            .toolResult(id: "1", content: "c", isError: true),
            .permissionRequest(toolUseId: "1", name: "n", input: .null),
            .response(content: "c", tokensUsed: 3),
            .result(numTurns: 1, durationMs: 2, totalCostUsd: 0.5, subtype: .cancelled),
            .system(message: "s"),
            .error(message: "m", type: "t", param: "p", code: "c"),
            .error(message: "m", type: nil, param: nil, code: nil),
            .rateLimited(retryAfter: 0.1),
        ]
        for event in events {
            #expect(!event.jsonLine.contains("\n"))
            #expect(ChannelEvent(line: event.jsonLine) == event, "\(event.jsonLine)")
        }
        #expect(ChannelEvent.partial(text: "Hi").jsonLine == #"{"type":"partial","data":{"text":"Hi"}}"#)
        #expect(ChannelEvent.rateLimited(retryAfter: 2).jsonLine
            == #"{"type":"error","error":{"message":"rate limit exceeded","type":"rate_limit_error","retry_after":2}}"#)
    }

    @Test func commandsEncodeToExactJSONLines() {
        #expect(ChannelCommand.message(content: "User message", model: "claude-3-5-haiku-20241022").line
            == #"{"type":"message","data":{"content":"User message","model":"claude-3-5-haiku-20241022"}}"# + "\n")
        #expect(ChannelCommand.message(content: "hi").message == #"{"type":"message","data":{"content":"hi"}}"#)
        #expect(ChannelCommand.message(content: "a\"b\\c\nd/é").message
            == #"{"type":"message","data":{"content":"a\"b\\c\nd/é"}}"#)
        #expect(ChannelCommand.cancel.line == #"{"type":"cancel","data":{}}"# + "\n")
        #expect(ChannelCommand.permission(toolUseId: "toolu_1", decision: .allowOnce).message
            == #"{"type":"permission","data":{"tool_use_id":"toolu_1","decision":"allow_once"}}"#)
        #expect(ChannelCommand.permission(toolUseId: "t", decision: .alwaysAllow).message
            == #"{"type":"permission","data":{"tool_use_id":"t","decision":"always_allow"}}"#)
        #expect(ChannelCommand.permission(toolUseId: "t", decision: .deny).message
            == #"{"type":"permission","data":{"tool_use_id":"t","decision":"deny"}}"#)
    }

    @Test func commandsParseBack() throws {
        let commands: [ChannelCommand] = [
            .message(content: "x", model: "m"), .message(content: "ü\n", model: nil), .cancel,
            .permission(toolUseId: "t", decision: .deny), .permission(toolUseId: "t", decision: .alwaysAllow),
        ]
        for c in commands { #expect(try ChannelCommand(line: c.message) == c) }
        #expect(throws: ChannelCommand.DecodingError.self) { try ChannelCommand(line: "nope") }
        #expect(throws: ChannelCommand.DecodingError.self) { try ChannelCommand(line: #"{"type":"dance","data":{}}"#) }
        #expect(throws: ChannelCommand.DecodingError.self) {
            try ChannelCommand(line: #"{"type":"permission","data":{"tool_use_id":"t","decision":"maybe"}}"#)
        }
    }

    @Test func jsonValueRoundTripsThroughCodable() throws {
        let value: JSONValue = ["s": "x", "n": -3.5, "b": true, "z": nil, "a": [1, ["k": "v"]]]
        let data = try JSONEncoder().encode(value)
        #expect(try JSONDecoder().decode(JSONValue.self, from: data) == value)
        #expect(value.jsonText == #"{"a":[1,{"k":"v"}],"b":true,"n":-3.5,"s":"x","z":null}"#)
        #expect(value["a"]?.arrayValue?.count == 2)
    }
}

@Suite("ChannelEndpoint")
struct ChannelEndpointTests {
    @Test func buildsTheChannelRequest() throws {
        let e = try ChannelEndpoint(baseURL: "ws://127.0.0.1:8090", sessionID: "a b/ü", token: "s3cr3t")
        #expect(e.scheme == .ws)
        #expect(e.host == "127.0.0.1")
        #expect(e.port == 8090)
        #expect(e.path == "/v1/ws")
        #expect(e.queryItems.map(\.name) == ["session_id"])
        #expect(e.requestTarget == "/v1/ws?session_id=a%20b%2F%C3%BC")
        #expect(e.headers.map(\.name) == ["Authorization"])
        #expect(e.headers.map(\.value) == ["Bearer s3cr3t"])
        #expect(PercentEncoding.encode("a b/ü") == "a%20b%2F%C3%BC")
        #expect(PercentEncoding.encode("AZaz09-._~") == "AZaz09-._~")
        #expect(PercentEncoding.encode("?&=#+%") == "%3F%26%3D%23%2B%25")

        let noToken = try ChannelEndpoint(baseURL: "https://api.example.com/", sessionID: "550e8400", token: nil)
        #expect(noToken.scheme == .wss)
        #expect(noToken.port == 443)
        #expect(noToken.headers.isEmpty)
        #expect(try ChannelEndpoint(baseURL: "http://h", sessionID: "s", token: nil).port == 80)
        #expect(try ChannelEndpoint(baseURL: "wss://[::1]:9000", sessionID: "s", token: nil).host == "::1")
    }

    @Test(arguments: [
        "ws://h/v1", "ws://h/v1/ws", "ws://h//", "ws://h?x=1", "ws://h/?", "ws://h#frag", "ws://h/#",
        "ftp://h", "h:8080", "ws://", "ws://user:pw@h", "not a url", "ws://h:70000",
    ])
    func rejectsNonHostOnlyBaseURLs(_ url: String) {
        #expect(throws: ChannelError.self) { try ChannelEndpoint(baseURL: url, sessionID: "s", token: nil) }
    }

    @Test func rejectionMessagesAreClearAndNeverEchoCredentials() {
        do {
            _ = try ChannelEndpoint(baseURL: "ws://h/api", sessionID: "s", token: nil)
            Issue.record("no error")
        } catch {
            #expect("\(error)".contains("host-only"))
            #expect("\(error)".contains("/api"))
        }
        do {
            _ = try ChannelEndpoint(baseURL: "ws://bob:hunter2@h", sessionID: "s", token: nil)
            Issue.record("no error")
        } catch {
            #expect(!"\(error)".contains("hunter2"))
        }
        #expect(throws: ChannelError.invalidSessionID(reason: "session id is empty")) {
            try ChannelEndpoint(baseURL: "ws://h", sessionID: "", token: nil)
        }
    }

    @Test func neverRevealsTheToken() throws {
        let token = "tok-SECRET-1234"
        let e = try ChannelEndpoint(baseURL: "wss://example.com:8443", sessionID: "sess", token: token)
        var dumped = ""
        dump(e, to: &dumped)
        let renderings = [e.description, e.debugDescription, String(describing: e), String(reflecting: e),
                          "\(e)", "\([e])", "\(Optional(e) as Any)", dumped,
                          String(describing: Mirror(reflecting: e).children.map { "\($0.label ?? ""): \($0.value)" })]
        for r in renderings {
            #expect(!r.contains(token), "token leaked in: \(r)")
            #expect(!r.contains("SECRET"), "token leaked in: \(r)")
        }
        #expect(e.description.contains("<redacted>"))
        #expect(e.description.contains("wss://example.com:8443/v1/ws?session_id=sess"))
        #expect(e.hasToken)
    }
}

@Suite("Channel resumption wire format")
struct ChannelResumeCodingTests {
    @Test func resumeFailedDecodesAndEncodes() {
        let line = #"{"type":"system","data":{"subtype":"resume_failed","reason":"buffer_exceeded"},"seq":42}"#
        #expect(ChannelEvent(line: line) == .resumeFailed(reason: "buffer_exceeded"))
        #expect(ChannelEvent(line: #"{"type":"system","data":{"subtype":"resume_failed"}}"#) == .resumeFailed(reason: "unknown"))
        let encoded = ChannelEvent.resumeFailed(reason: "session_not_found").jsonLine
        #expect(encoded.hasPrefix(#"{"type":"system","data":{"subtype":"resume_failed","reason":"session_not_found","#))
        #expect(ChannelEvent(line: encoded) == .resumeFailed(reason: "session_not_found"))
        #expect(ChannelEvent.resumeFailed(reason: "x").type == "system")
        // A seq never changes what an event is.
        #expect(ChannelEvent(line: #"{"type":"partial","data":{"text":"a"},"seq":7}"#) == .partial(text: "a"))
    }

    @Test func messageCommandsCarryAnOptionalID() throws {
        #expect(ChannelCommand.message(content: "hi", id: "c-1").message
                == #"{"type":"message","id":"c-1","data":{"content":"hi"}}"#)
        #expect(ChannelCommand.message(content: "hi").message == #"{"type":"message","data":{"content":"hi"}}"#)
        #expect(try ChannelCommand(line: #"{"type":"message","id":"c-2","data":{"content":"x","model":"m"}}"#)
                == .message(content: "x", model: "m", id: "c-2"))
        #expect(try ChannelCommand(line: #"{"type":"message","data":{"content":"x"}}"#) == .message(content: "x"))
    }

    @Test func theEndpointSendsLastSeqWhenSet() throws {
        var e = try ChannelEndpoint(baseURL: "ws://127.0.0.1:9", sessionID: "s", token: "secret-token")
        #expect(e.requestTarget == "/v1/ws?session_id=s")
        e.lastSequence = 17
        #expect(e.requestTarget == "/v1/ws?session_id=s&last_seq=17")
        #expect(!"\(e)".contains("secret-token"))
    }
}
