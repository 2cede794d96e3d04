/// The client side of the opening handshake (RFC 6455 §4.1 request, §4.2.2 response checks).
///
/// Pure: the caller supplies the 16 random key bytes, writes ``requestBytes``, parses the
/// answer with ``HTTPResponseParser`` and passes the head to ``validate(_:)``.
public struct WebSocketClientHandshake: Sendable {
    /// Header names the handshake writes itself; `extraHeaders` may not contain them.
    static let reservedRequestHeaders: [String] = [
        "host", "upgrade", "connection", "sec-websocket-key", "sec-websocket-version",
        "sec-websocket-protocol", "sec-websocket-extensions", "sec-websocket-accept", "origin",
        "content-length", "transfer-encoding",
    ]

    /// The `Host` value.
    public let host: String
    /// The request target.
    public let path: String
    /// The `Origin` value, if any.
    public let origin: String?
    /// The offered subprotocols, in preference order.
    public let subprotocols: [String]
    /// `Sec-WebSocket-Key`: base64 of the 16 key bytes.
    public let keyBase64: String
    /// The `Sec-WebSocket-Accept` value the server must answer with.
    public let expectedAccept: String
    /// The permessage-deflate settings offered, if any.
    public let deflate: PerMessageDeflateConfiguration?
    /// The full GET request: request line; `Host`, `Upgrade: websocket`, `Connection: Upgrade`,
    /// `Sec-WebSocket-Key`, `Sec-WebSocket-Version: 13`, then `Origin`,
    /// `Sec-WebSocket-Protocol` and `Sec-WebSocket-Extensions` if any, then the extra headers in
    /// order; ending with CRLF CRLF.
    public let requestBytes: [UInt8]

    /// What a valid response agreed to.
    public struct Accepted: Sendable, Equatable {
        /// The subprotocol the server selected, if any.
        public var subprotocol: String?
        /// The permessage-deflate parameters, if the server accepted the offer.
        public var deflate: PerMessageDeflateParameters?
    }

    /// Prepares a handshake.
    ///
    /// - Parameters:
    ///   - host: the `Host` value; include `:port` when it is not the scheme default
    ///     (RFC 6455 §4.1 item 4). Visible ASCII only, non-empty.
    ///   - path: the request target: `/path` plus optional `?query`, already percent-encoded.
    ///     Must start with `/` and contain only visible ASCII (no spaces, no controls).
    ///   - key: the 16 random bytes of `Sec-WebSocket-Key` (§4.1 item 7), from a CSPRNG.
    ///   - origin: the `Origin` value (§4.1 item 8), if any.
    ///   - subprotocols: offered subprotocols in preference order; tokens, no duplicates.
    ///   - deflate: offer permessage-deflate with these settings
    ///     (``PerMessageDeflate/offer(for:)``); nil offers no extension.
    ///   - extraHeaders: additional fields (e.g. `Authorization`); names must be tokens and may
    ///     not be fields the handshake writes itself; values may not contain CR, LF, NUL or
    ///     other control characters.
    /// - Throws: ``WebSocketHandshakeError/invalidArgument`` when any of the above is violated.
    public init(host: String, path: String, key: [UInt8], origin: String? = nil, subprotocols: [String] = [],
                deflate: PerMessageDeflateConfiguration? = nil, extraHeaders: [(String, String)] = []) throws(WebSocketHandshakeError) {
        guard !host.isEmpty, host.utf8.allSatisfy(HTTPSyntax.isTargetByte) else {
            throw .argument("host must be non-empty visible ASCII")
        }
        guard path.utf8.first == UInt8(ascii: "/"), path.utf8.allSatisfy(HTTPSyntax.isTargetByte) else {
            throw .argument("path must start with / and contain only visible ASCII")
        }
        guard key.count == 16 else { throw .argument("key must be 16 bytes, got \(key.count)") }
        if let origin, !HTTPSyntax.isValidFieldValue(origin) {
            throw .argument("origin contains a control character")
        }
        for (index, subprotocol) in subprotocols.enumerated() {
            guard HTTPSyntax.isToken(subprotocol) else { throw .argument("subprotocol is not a token") }
            guard !subprotocols[..<index].contains(subprotocol) else { throw .argument("duplicate subprotocol \(subprotocol)") }
        }
        for (name, value) in extraHeaders {
            guard HTTPSyntax.isToken(name) else { throw .argument("header name is not a token") }
            guard !Self.reservedRequestHeaders.contains(HTTPSyntax.asciiLowercased(name)) else {
                throw .argument("header \(name) is written by the handshake itself")
            }
            guard HTTPSyntax.isValidFieldValue(value) else { throw .argument("value of \(name) contains a control character") }
        }

        self.host = host
        self.path = path
        self.origin = origin
        self.subprotocols = subprotocols
        self.deflate = deflate
        keyBase64 = Base64.encode(key)
        expectedAccept = WebSocketServerHandshake.acceptValue(forKey: keyBase64)

        var request = "GET \(path) HTTP/1.1\r\nHost: \(host)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        request += "Sec-WebSocket-Key: \(keyBase64)\r\nSec-WebSocket-Version: 13\r\n"
        if let origin { request += "Origin: \(origin)\r\n" }
        if !subprotocols.isEmpty { request += "Sec-WebSocket-Protocol: \(subprotocols.joined(separator: ", "))\r\n" }
        if let deflate { request += "Sec-WebSocket-Extensions: \(PerMessageDeflate.offer(for: deflate).headerValue)\r\n" }
        for (name, value) in extraHeaders { request += "\(name): \(value)\r\n" }
        request += "\r\n"
        requestBytes = Array(request.utf8)
    }

    /// Validates the server's response head (RFC 6455 §4.1, client requirements 1–6).
    ///
    /// - Returns: the subprotocol the server selected, or `nil` when it selected none.
    /// - Throws: ``WebSocketHandshakeError/rejected(status:)`` for any status other than 101 (the
    ///   caller reads the body itself if it wants it); ``WebSocketHandshakeError/missingUpgrade``
    ///   unless `Upgrade` is exactly `websocket` (case-insensitive);
    ///   ``WebSocketHandshakeError/missingConnectionUpgrade`` unless the `Connection` token list
    ///   contains `upgrade`; ``WebSocketHandshakeError/badAccept`` unless there is exactly one
    ///   `Sec-WebSocket-Accept` equal to ``expectedAccept``;
    ///   ``WebSocketHandshakeError/unexpectedExtension`` when `Sec-WebSocket-Extensions` lists
    ///   anything but an acceptable answer to our permessage-deflate offer
    ///   (``PerMessageDeflate/validate(answer:offered:)``);
    ///   ``WebSocketHandshakeError/unexpectedSubprotocol`` when the server selects a
    ///   subprotocol that was not offered (case-sensitive) or more than one.
    public func validate(_ response: HTTPResponseHead) throws(WebSocketHandshakeError) -> String? {
        try accept(response).subprotocol
    }

    /// Validates the server's response head like ``validate(_:)`` and returns everything it
    /// agreed to: the subprotocol and the permessage-deflate parameters.
    public func accept(_ response: HTTPResponseHead) throws(WebSocketHandshakeError) -> Accepted {
        let headers = response.headers
        guard response.status == 101 else { throw .rejected(status: response.status) }
        guard headers.tokens(for: "Upgrade") == ["websocket"] else { throw .missingUpgrade }
        guard headers.tokens(for: "Connection").contains("upgrade") else { throw .missingConnectionUpgrade }
        let accepts = headers.values(for: "Sec-WebSocket-Accept")
        guard accepts.count == 1, let accept = accepts.first,
              HTTPSyntax.trimmingOWS(accept) == expectedAccept
        else { throw .badAccept }
        let parameters = try PerMessageDeflate.validate(answer: headers.values(for: "Sec-WebSocket-Extensions"),
                                                        offered: deflate)
        let selected = headers.listElements(for: "Sec-WebSocket-Protocol")
        guard let subprotocol = selected.first else { return Accepted(subprotocol: nil, deflate: parameters) }
        guard selected.count == 1, subprotocols.contains(subprotocol) else { throw .unexpectedSubprotocol }
        return Accepted(subprotocol: subprotocol, deflate: parameters)
    }
}
