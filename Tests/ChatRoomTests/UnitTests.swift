import Foundation
import ChatRoomCore
import Testing

/// The rate limiter and the line validation, in isolation (their sources are shared with the
/// `chat-room` target through the symlinks in Shared/).
@Suite struct RateLimiterTests {
    final class FakeClock: @unchecked Sendable {
        // Only touched from the test's own task.
        var now = 100.0
    }

    @Test func burstThenLimitedWithRetryAfter() {
        let clock = FakeClock()
        var limiter = RateLimiter(ratePerSecond: 20, burst: 40, now: { clock.now })
        for _ in 0..<40 { #expect(limiter.take() == .allowed) }
        guard case .limited(let retry) = limiter.take() else { Issue.record("41st line allowed"); return }
        #expect(retry > 0 && retry <= 0.05 + 1e-9)
    }

    @Test func refillsAtRateAndCapsAtBurst() {
        let clock = FakeClock()
        var limiter = RateLimiter(ratePerSecond: 20, burst: 40, now: { clock.now })
        for _ in 0..<40 { _ = limiter.take() }
        clock.now += 0.5 // 10 tokens
        for _ in 0..<10 { #expect(limiter.take() == .allowed) }
        #expect(limiter.take() != .allowed)
        clock.now += 3600 // refills to the burst, not beyond
        for _ in 0..<40 { #expect(limiter.take() == .allowed) }
        #expect(limiter.take() != .allowed)
    }

    @Test func sustainedRateIsAllowed() {
        let clock = FakeClock()
        var limiter = RateLimiter(ratePerSecond: 20, burst: 40, now: { clock.now })
        for _ in 0..<1000 {
            clock.now += 0.05
            #expect(limiter.take() == .allowed)
        }
    }

    @Test func retryAfterGrowsWithDeficitAndClockGoingBackIsIgnored() {
        let clock = FakeClock()
        var limiter = RateLimiter(ratePerSecond: 2, burst: 1, now: { clock.now })
        #expect(limiter.take() == .allowed)
        #expect(limiter.take() == .limited(retryAfter: 0.5))
        clock.now -= 10
        #expect(limiter.take() == .limited(retryAfter: 0.5))
        clock.now += 10.5
        #expect(limiter.take() == .allowed)
    }
}

@Suite struct ValidationTests {
    func parse(_ s: String) -> Result<ClientCommand, ChatError> { ChatValidation.parse(Data(s.utf8)) }
    func code(_ s: String) -> String? {
        if case .failure(let e) = parse(s) { return e.code }
        return nil
    }

    @Test func validCommands() {
        #expect(parse(#"{"type":"join","room":" general ","user":"alice"}"#) == .success(.join(room: "general", user: "alice")))
        #expect(parse(#"{"type":"message","room":"g","text":"hi there"}"#) == .success(.message(room: "g", text: "hi there")))
        #expect(parse(#"{"type":"leave","room":"g"}"#) == .success(.leave(room: "g")))
        #expect(parse(#"{"type":"typing","room":"g","isTyping":false}"#) == .success(.typing(room: "g", isTyping: false)))
        #expect(parse(#"{"type":"message","room":"g","text":"\#(String(repeating: "é", count: 2000))"}"#)
                == .success(.message(room: "g", text: String(repeating: "é", count: 2000))))
    }

    @Test(arguments: [
        ("not json", "invalid_json"),
        ("[1,2]", "invalid_json"),
        (#"{"room":"g"}"#, "missing_field"),
        (#"{"type":7}"#, "invalid_field"),
        (#"{"type":"shout","room":"g"}"#, "unknown_type"),
        (#"{"type":"join","room":"g"}"#, "missing_field"),
        (#"{"type":"join","room":"g","user":null}"#, "missing_field"),
        (#"{"type":"join","room":5,"user":"a"}"#, "invalid_field"),
        (#"{"type":"typing","room":"g","isTyping":1}"#, "invalid_field"),
        (#"{"type":"typing","room":"g"}"#, "missing_field"),
        (#"{"type":"join","room":"  ","user":"a"}"#, "invalid_room"),
        (#"{"type":"join","room":"g","user":""}"#, "invalid_user"),
        (#"{"type":"join","room":"g","user":"a\u0007b"}"#, "invalid_user"),
        (#"{"type":"message","room":"g","text":"   "}"#, "empty_text"),
        (#"{"type":"join","room":"g","user":"a","since":0,"rejoinKey":5}"#, "invalid_field"),
        (#"{"type":"join","room":"g","user":"a","since":0,"rejoinKey":"\#(String(repeating: "k", count: 65))"}"#, "invalid_field"),
    ])
    func rejected(line: String, expected: String) {
        #expect(code(line) == expected, "\(line)")
    }

    @Test func lengthLimits() {
        let name64 = String(repeating: "n", count: 64), name65 = name64 + "n"
        #expect(code(#"{"type":"join","room":"\#(name64)","user":"\#(name64)"}"#) == nil)
        #expect(code(#"{"type":"join","room":"\#(name65)","user":"a"}"#) == "invalid_room")
        #expect(code(#"{"type":"join","room":"g","user":"\#(name65)"}"#) == "invalid_user")
        #expect(code(#"{"type":"message","room":"g","text":"\#(String(repeating: "x", count: 2001))"}"#) == "text_too_long")
    }

    @Test func rejoinKeyIsParsedAndEncoded() {
        let key = "q3Xw0JdHc1lBvS2nQ8kY4g"
        #expect(parse(#"{"type":"join","room":"g","user":"a","since":7,"rejoinKey":"\#(key)"}"#)
                == .success(.join(room: "g", user: "a", since: 7, rejoinKey: key)))
        #expect(parse(#"{"type":"join","room":"g","user":"a","since":7,"rejoinKey":null}"#)
                == .success(.join(room: "g", user: "a", since: 7)))
        #expect(ChatCommand.join(room: "g", user: "a", since: 7, rejoinKey: key).line
                == #"{"rejoinKey":"\#(key)","room":"g","since":7,"type":"join","user":"a"}"# + "\n")
        #expect(ChatCommand.join(room: "g", user: "a", since: 7).line == #"{"room":"g","since":7,"type":"join","user":"a"}"# + "\n")
    }

    @Test func chatCommandEncodesOneJSONLine() {
        #expect(ChatCommand.join(room: "g", user: "a").line == #"{"room":"g","type":"join","user":"a"}"# + "\n")
        #expect(ChatCommand.typing(room: "g", isTyping: true).line == #"{"isTyping":true,"room":"g","type":"typing"}"# + "\n")
        #expect(ChatCommand.message(room: "g", text: "a\nb \"q\"").message == #"{"room":"g","text":"a\nb \"q\"","type":"message"}"#)
        // What the client encodes, the server parses back.
        for c in [ChatCommand.join(room: "r", user: "u"), .message(room: "r", text: "t"), .leave(room: "r"), .typing(room: "r", isTyping: true)] {
            #expect((try? ChatValidation.parse(Data(c.message.utf8)).get()) != nil)
        }
    }
}

/// The token-related wire (issue 33): `refresh`, a `join` without `user`, and its errors.
@Suite struct TokenWireTests {
    @Test func refreshIsParsedAndEncoded() {
        #expect(ChatValidation.parse(Data(#"{"type":"refresh","token":"a.b.c"}"#.utf8)) == .success(.refresh(token: "a.b.c")))
        #expect(ChatCommand.refresh(token: "a.b.c").line == #"{"token":"a.b.c","type":"refresh"}"# + "\n")
        let tooLong = String(repeating: "t", count: ChatLimits.maxTokenLength + 1)
        for line in [#"{"type":"refresh"}"#, #"{"type":"refresh","token":5}"#, #"{"type":"refresh","token":""}"#,
                     #"{"type":"refresh","token":"\#(tooLong)"}"#] {
            guard case .failure(let e) = ChatValidation.parse(Data(line.utf8)) else {
                Issue.record("accepted \(line.prefix(60))"); continue
            }
            #expect(["missing_field", "invalid_field"].contains(e.code), "\(line.prefix(60))")
        }
    }

    @Test func joinWithoutUserIsAcceptedOnlyWhenTheTokenNamesTheUser() {
        let line = Data(#"{"type":"join","room":"g"}"#.utf8)
        #expect(ChatValidation.parse(line, userRequired: false) == .success(.join(room: "g", user: nil)))
        guard case .failure(let e) = ChatValidation.parse(line) else { Issue.record("accepted without user"); return }
        #expect(e.code == "missing_field")
        // Given, the name is still validated.
        guard case .failure(let bad) = ChatValidation.parse(Data(#"{"type":"join","room":"g","user":""}"#.utf8),
                                                            userRequired: false) else { Issue.record("empty user"); return }
        #expect(bad.code == "invalid_user")
        #expect(ChatCommand.join(room: "g", user: nil).line == #"{"room":"g","type":"join"}"# + "\n")
    }

    @Test func permissionErrorsHaveTheirCodesAndTypes() {
        #expect(ChatError.forbidden("x").code == "forbidden" && ChatError.forbidden("x").type == "permission_error")
        #expect(ChatError.roomForbidden("x").code == "room_forbidden" && ChatError.roomForbidden("x").type == "permission_error")
        #expect(ChatError.invalidToken("expired").code == "invalid_token")
    }
}

/// The `rooms` claim: names with `*` wildcards.
@Suite struct RoomPatternsTests {
    @Test(arguments: [
        ("lobby", "lobby", true), ("lobby", "Lobby", false), ("lobby", "lobby2", false),
        ("team-*", "team-a", true), ("team-*", "team-", true), ("team-*", "team", false),
        ("*", "anything", true), ("*-x-*", "a-x-b", true), ("*-x-*", "a-y-b", false),
        ("a*b*c", "aXbYc", true), ("a*b*c", "aXbY", false), ("a**", "a", true), ("*c", "abcbc", true),
        ("é*", "été", true),
    ])
    func wildcardMatching(pattern: String, room: String, expected: Bool) {
        #expect(RoomPatterns.matches(room, pattern: pattern) == expected, "\(pattern) ~ \(room)")
    }

    @Test func claimTextForms() {
        #expect(RoomPatterns(claim: nil).allows("any"))
        let list = RoomPatterns(claim: #"["lobby","team-*"]"#)
        #expect(list.allows("lobby") && list.allows("team-red") && !list.allows("random"))
        #expect(RoomPatterns(claim: "lobby").allows("lobby") && !RoomPatterns(claim: "lobby").allows("other"))
        // Claims the server cannot read allow nothing (never everything).
        for unreadable in ["5", "true", #"{"a":1}"#, #"["a",5]"#, "[", "null"] {
            #expect(!RoomPatterns(claim: unreadable).allows("a"), "\(unreadable)")
        }
        #expect(!RoomPatterns(claim: "[]").allows("lobby"))
    }

    @Test func pathologicalPatternsStayCheap() {
        let pattern = String(repeating: "*a", count: 32) + "b"
        let clock = ContinuousClock()
        let took = clock.measure { #expect(!RoomPatterns.matches(String(repeating: "a", count: 64), pattern: pattern)) }
        #expect(took < .seconds(5))   // a guard against exponential backtracking only
    }
}

/// The client's reading of a token's `exp` (unverified, for scheduling a refresh).
@Suite struct TokenExpiryTests {
    private func token(_ payload: String) -> String {
        let b64 = Data(payload.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        return "eyJhbGciOiJIUzI1NiJ9.\(b64).c2ln"
    }

    @Test func readsExpAndRefusesEverythingElse() {
        #expect(TokenExpiry.of(token(#"{"sub":"a","exp":1700000000}"#)) == Date(timeIntervalSince1970: 1_700_000_000))
        #expect(TokenExpiry.of(token(#"{"sub":"a"}"#)) == nil)
        #expect(TokenExpiry.of(token(#"{"exp":"soon"}"#)) == nil)
        #expect(TokenExpiry.of(token(#"{"exp":1e300}"#)) == nil)
        #expect(TokenExpiry.of(token("[1]")) == nil)
        #expect(TokenExpiry.of("not a token") == nil)
        #expect(TokenExpiry.of("a.%%%.c") == nil)
        #expect(TokenExpiry.unixSeconds(Date(timeIntervalSince1970: 12.9)) == 12)
        #expect(TokenExpiry.unixSeconds(Date(timeIntervalSince1970: -5)) == nil)
    }
}
