import SwitchboardCore

/// What a connection keeps of its opening handshake: the server keeps the request, the client
/// the response.
enum ConnectionHandshake: Sendable {
    case server(WebSocketUpgradeRequest)
    case client(ClientHandshakeRecord)
}

/// A client connection's handshake answer; a class so the enum stays one request wide.
final class ClientHandshakeRecord: Sendable {
    let response: HTTPResponseHead
    let tlsVersion: String?

    init(response: HTTPResponseHead, tlsVersion: String?) {
        self.response = response
        self.tlsVersion = tlsVersion
    }
}
