import Testing
@testable import SwitchboardCore

/// RFC 7692 §5 and §7.1: offers, answers and their checks.
@Suite("RFC 7692 §7.1 negotiation")
struct PerMessageDeflateNegotiationTests {
    private func accept(_ header: String, _ configuration: PerMessageDeflateConfiguration = .default) -> String? {
        PerMessageDeflate.accept(offers: [header], configuration: configuration)?.headerValue
    }

    @Test func defaultServerAnswersNoContextTakeoverBothWays() {
        #expect(accept("permessage-deflate; client_max_window_bits")
                == "permessage-deflate; server_no_context_takeover; client_no_context_takeover")
        #expect(accept("permessage-deflate")
                == "permessage-deflate; server_no_context_takeover; client_no_context_takeover")
    }

    @Test func serverHonoursTheWindowTheClientAsksFor() {
        #expect(accept("permessage-deflate; server_max_window_bits=10")
                == "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10")
        // Quoted values are unquoted first (RFC 6455 §9.1).
        #expect(accept(#"permessage-deflate; server_max_window_bits="12""#)?.hasSuffix("server_max_window_bits=12") == true)
    }

    @Test func serverDeclinesWhatZlibCannotDoAndMovesToTheNextOffer() {
        #expect(accept("permessage-deflate; server_max_window_bits=8") == nil)
        #expect(accept("permessage-deflate; server_max_window_bits=8, permessage-deflate")
                == "permessage-deflate; server_no_context_takeover; client_no_context_takeover")
    }

    @Test(arguments: [
        "permessage-deflate; foo",                                      // unknown parameter
        "permessage-deflate; server_no_context_takeover; server_no_context_takeover",  // repeated
        "permessage-deflate; server_no_context_takeover=1",             // value not allowed
        "permessage-deflate; server_max_window_bits",                   // value required
        "permessage-deflate; server_max_window_bits=16",                // out of range
        "permessage-deflate; server_max_window_bits=010",               // leading zero
        "permessage-deflate; client_max_window_bits=7",
        "x-webkit-deflate-frame",                                       // another extension
        "permessage-deflate; client_max_window_bits=\"1",               // unterminated quote
    ])
    func serverDeclinesInvalidOffers(_ header: String) {
        #expect(accept(header) == nil)
    }

    @Test func serverPicksTheFirstAcceptableOfferAcrossFields() {
        let answer = PerMessageDeflate.accept(offers: ["x-foo, permessage-deflate; bogus", "permessage-deflate; server_max_window_bits=11"],
                                              configuration: .default)
        #expect(answer?.serverMaxWindowBits == 11)
    }

    @Test func contextTakeoverServerKeepsContextUnlessAskedAndLimitsTheClientWindow() {
        let config = PerMessageDeflateConfiguration(mode: .contextTakeover(windowBits: 12, memoryLevel: 5))
        #expect(accept("permessage-deflate; client_max_window_bits", config) == "permessage-deflate; client_max_window_bits=12")
        #expect(accept("permessage-deflate", config) == "permessage-deflate")
        #expect(accept("permessage-deflate; server_no_context_takeover; client_no_context_takeover", config)
                == "permessage-deflate; server_no_context_takeover; client_no_context_takeover")
        #expect(accept("permessage-deflate; server_max_window_bits=14; client_max_window_bits=10", config)
                == "permessage-deflate; server_max_window_bits=12; client_max_window_bits=10")
    }

    @Test func clientOffers() {
        #expect(PerMessageDeflate.offer(for: .default).headerValue
                == "permessage-deflate; server_no_context_takeover; client_no_context_takeover; client_max_window_bits")
        #expect(PerMessageDeflate.offer(for: .contextTakeover).headerValue == "permessage-deflate; client_max_window_bits")
        #expect(PerMessageDeflate.offer(for: PerMessageDeflateConfiguration(mode: .contextTakeover(windowBits: 10))).headerValue
                == "permessage-deflate; client_max_window_bits=10")
    }

    @Test func clientAcceptsValidAnswers() throws {
        let p = try PerMessageDeflate.validate(answer: ["permessage-deflate; server_no_context_takeover; client_max_window_bits=9"],
                                               offered: .contextTakeover)
        #expect(p == PerMessageDeflateParameters(serverNoContextTakeover: true, clientMaxWindowBits: 9))
        #expect(try PerMessageDeflate.validate(answer: [], offered: .contextTakeover) == nil)
        #expect(try PerMessageDeflate.validate(answer: ["permessage-deflate; server_max_window_bits=8"], offered: .default)?
            .serverMaxWindowBits == 8)
    }

    @Test(arguments: [
        ("permessage-deflate, permessage-deflate", "offered"),
        ("x-unknown", "offered"),
        ("permessage-deflate; foo", "offered"),
        ("permessage-deflate; server_no_context_takeover; server_no_context_takeover", "offered"),
        ("permessage-deflate; client_max_window_bits=8", "offered"),
        ("permessage-deflate; server_max_window_bits=99", "offered"),
        ("permessage-deflate; client_max_window_bits=12", "windowed"),  // above the offered 10
        ("permessage-deflate", "nothing"),                              // nothing was offered
    ])
    func clientRejectsInvalidAnswers(_ answer: String, _ offer: String) {
        let offered: PerMessageDeflateConfiguration? = switch offer {
        case "windowed": PerMessageDeflateConfiguration(mode: .contextTakeover(windowBits: 10))
        case "nothing": nil
        default: .default
        }
        #expect(throws: WebSocketHandshakeError.unexpectedExtension) {
            try PerMessageDeflate.validate(answer: [answer], offered: offered)
        }
    }

    @Test func handshakesCarryTheExtension() throws {
        let client = try WebSocketClientHandshake(host: "h", path: "/", key: Array(repeating: 1, count: 16), deflate: .default)
        let request = String(decoding: client.requestBytes, as: UTF8.self)
        #expect(request.contains("\r\nSec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; client_no_context_takeover; client_max_window_bits\r\n"))

        var parser = HTTPRequestParser()
        guard case .complete(let head, _)? = try? parser.parse(client.requestBytes),
              case .upgrade(let upgrade) = try WebSocketServerHandshake.classify(head) else {
            Issue.record("request did not parse")
            return
        }
        let params = PerMessageDeflate.accept(offers: upgrade.headers.values(for: "Sec-WebSocket-Extensions"), configuration: .default)
        let response = try WebSocketServerHandshake.acceptResponse(for: upgrade, subprotocol: nil, deflate: params)
        var responseParser = HTTPResponseParser()
        guard case .complete(let responseHead, _)? = try? responseParser.parse(response) else {
            Issue.record("response did not parse")
            return
        }
        let accepted = try client.accept(responseHead)
        #expect(accepted.deflate == params)
        #expect(accepted.deflate?.serverNoContextTakeover == true)
    }

    @Test func extensionHeaderGrammar() {
        #expect(WebSocketExtension.parse(["a; b=1; c=\"x\", d ,, e"]) == [
            WebSocketExtension(name: "a", parameters: [.init(name: "b", value: "1"), .init(name: "c", value: "x")]),
            WebSocketExtension(name: "d"), WebSocketExtension(name: "e"),
        ])
        #expect(WebSocketExtension.parse(["a; b=\"two words\""]) == nil)
        #expect(WebSocketExtension.parse(["a; =1"]) == nil)
        #expect(WebSocketExtension.parse(["a b"]) == nil)
    }
}
