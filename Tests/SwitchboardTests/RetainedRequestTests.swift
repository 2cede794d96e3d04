import Testing
@testable import Switchboard
import SwitchboardCore

/// The request a connection keeps for its lifetime (`WebSocketConnection.request`): the fields
/// only the handshake needed go (their values are in the request's own properties), the rest
/// stay in order.
@Suite struct RetainedRequestTests {
    @Test func handshakeOnlyFieldsGoAndTheApplicationsStay() throws {
        let text = "GET /chat?room=a HTTP/1.1\r\nHost: example.com\r\nupgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n"
            + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\nX-Trace: t1\r\n"
            + "Sec-WebSocket-Extensions: permessage-deflate\r\nSec-WebSocket-Protocol: chat\r\nCookie: c=1\r\n\r\n"
        var parser = HTTPRequestParser()
        guard case .complete(let head, _) = try parser.parse(Array(text.utf8)),
              case .upgrade(let request) = try WebSocketServerHandshake.classify(head) else {
            Issue.record("not an upgrade")
            return
        }
        let kept = ServerHandshakeHandler.retained(request)
        #expect(kept.head.headers.map(\.name) == ["Host", "X-Trace", "Sec-WebSocket-Protocol", "Cookie"])
        #expect(kept.head.headers["x-trace"] == "t1")
        #expect(kept.key == "dGhlIHNhbXBsZSBub25jZQ==")
        #expect(kept.subprotocols == ["chat"])
        #expect(kept.head.target == "/chat?room=a")
    }
}
