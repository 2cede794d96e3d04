/// The server side of the opening handshake (RFC 6455 §4.2.1 reading the request, §4.2.2
/// answering it).
public enum WebSocketServerHandshake {
    /// The GUID appended to the key before hashing (RFC 6455 §1.3).
    public static let acceptGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    /// Header names ``acceptResponse(for:subprotocol:deflate:extraHeaders:)`` writes itself.
    static let reservedResponseHeaders: [String] = [
        "upgrade", "connection", "sec-websocket-accept", "sec-websocket-protocol",
        "sec-websocket-extensions", "content-length", "transfer-encoding",
    ]

    /// Classifies a request head.
    ///
    /// A request without an `Upgrade` field is `.plainHTTP`. Any request with an `Upgrade`
    /// field is treated as an attempted WebSocket upgrade and checked in this order, the first
    /// failure being thrown with its ``WebSocketHandshakeError/response``:
    /// 1. method `GET`, else ``WebSocketHandshakeError/badMethod`` — 405 with `Allow: GET`
    ///    (405 rather than 400 because it names the fix; RFC 9110 §15.5.6 requires `Allow`);
    /// 2. HTTP/1.1 or later, else ``WebSocketHandshakeError/badVersion`` — 400;
    /// 3. `Upgrade` token list contains `websocket` (case-insensitive), else
    ///    ``WebSocketHandshakeError/missingUpgrade`` — 400 (so `Upgrade: h2c` is rejected);
    /// 4. `Connection` token list contains `upgrade`, else
    ///    ``WebSocketHandshakeError/missingConnectionUpgrade`` — 400;
    /// 5. exactly one non-empty `Host`, else ``WebSocketHandshakeError/missingHost`` — 400;
    /// 6. exactly one `Sec-WebSocket-Version` equal to `13`, else
    ///    ``WebSocketHandshakeError/unsupportedWebSocketVersion`` — 426 with
    ///    `Sec-WebSocket-Version: 13` (§4.2.2 item 4; a missing version is answered the same
    ///    way so the client learns what we speak);
    /// 7. exactly one `Sec-WebSocket-Key` that is strict base64 of 16 bytes, else
    ///    ``WebSocketHandshakeError/badKey`` — 400;
    /// 8. every offered subprotocol a token, else ``WebSocketHandshakeError/badSubprotocol`` — 400.
    public static func classify(_ head: HTTPRequestHead) throws(WebSocketHandshakeError) -> WebSocketRequestKind {
        let headers = head.headers
        guard headers.contains(name: "Upgrade") else { return .plainHTTP(head) }
        guard head.method == "GET" else { throw .badMethod }
        guard let version = head.versionNumbers, version.major > 1 || (version.major == 1 && version.minor >= 1) else {
            throw .badVersion
        }
        guard headers.containsListToken("websocket", in: "Upgrade") else { throw .missingUpgrade }
        guard headers.containsListToken("upgrade", in: "Connection") else { throw .missingConnectionUpgrade }
        guard let host = headers.onlyValue(for: "Host"), !HTTPSyntax.trimmingOWS(host).isEmpty else { throw .missingHost }
        guard let wsVersion = headers.onlyValue(for: "Sec-WebSocket-Version"), HTTPSyntax.trimmingOWS(wsVersion) == "13" else {
            throw .unsupportedWebSocketVersion
        }
        guard let rawKey = headers.onlyValue(for: "Sec-WebSocket-Key") else { throw .badKey }
        let key = HTTPSyntax.trimmingOWS(rawKey)
        guard Base64.decodedCount(key) == 16 else { throw .badKey }
        let subprotocols = headers.listElements(for: "Sec-WebSocket-Protocol")
        guard subprotocols.allSatisfy(HTTPSyntax.isToken) else { throw .badSubprotocol }
        return .upgrade(WebSocketUpgradeRequest(head: head, key: key, subprotocols: subprotocols, origin: headers["Origin"]))
    }

    /// `base64(SHA-1(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))` (RFC 6455 §4.2.2 item 5.4).
    /// `key` is used exactly as given (the base64 text, not its decoding).
    public static func acceptValue(forKey key: String) -> String {
        withAcceptDigest(forKey: key) { Base64.encode(buffer: $0) }
    }

    /// Appends ``acceptValue(forKey:)``'s 28 ASCII bytes to `output`, without a string between.
    static func appendAcceptValue(forKey key: String, to output: inout [UInt8]) {
        withAcceptDigest(forKey: key) { digest in
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Base64.encodedCount(digest.count)) { text in
                let count = Base64.encode(digest, into: text)
                output.append(contentsOf: UnsafeBufferPointer(rebasing: text[0..<count]))
            }
        }
    }

    /// SHA-1 of the key and the GUID, lent to `body`: the key, the GUID and the digest side by
    /// side on the stack, no array per handshake.
    private static func withAcceptDigest<R>(forKey key: String, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        let keyBytes = key.utf8, guid = acceptGUID.utf8
        let inputCount = keyBytes.count + guid.count
        return withUnsafeTemporaryAllocation(byteCount: inputCount + 20, alignment: 4) { buffer in
            UnsafeMutableRawBufferPointer(rebasing: buffer[0..<keyBytes.count]).copyBytes(from: keyBytes)
            UnsafeMutableRawBufferPointer(rebasing: buffer[keyBytes.count..<inputCount]).copyBytes(from: guid)
            let digest = UnsafeMutableRawBufferPointer(rebasing: buffer[inputCount...])
            SHA1.hash(UnsafeRawBufferPointer(rebasing: buffer[0..<inputCount]), into: digest)
            return body(UnsafeRawBufferPointer(digest))
        }
    }

    /// The `101 Switching Protocols` response bytes (§4.2.2 item 5): `Upgrade: websocket`,
    /// `Connection: Upgrade`, `Sec-WebSocket-Accept`, `Sec-WebSocket-Protocol` when
    /// `subprotocol` is given, `Sec-WebSocket-Extensions` when `deflate` is given (its
    /// ``PerMessageDeflateParameters/headerValue``, as chosen by
    /// ``PerMessageDeflate/accept(offers:configuration:)``), then `extraHeaders` in order,
    /// ending with CRLF CRLF.
    ///
    /// - Throws: ``WebSocketHandshakeError/invalidArgument`` when `subprotocol` is not one of
    ///   `request.subprotocols` or not a token, or an extra header has a non-token name, a name the response
    ///   writes itself, or a value containing CR, LF, NUL or another control character.
    public static func acceptResponse(for request: WebSocketUpgradeRequest, subprotocol: String?,
                                      deflate: PerMessageDeflateParameters? = nil,
                                      extraHeaders: [(String, String)] = []) throws(WebSocketHandshakeError) -> [UInt8] {
        if let subprotocol {
            guard request.subprotocols.contains(subprotocol) else {
                throw .argument("subprotocol \(subprotocol) was not offered by the client")
            }
            guard HTTPSyntax.isToken(subprotocol) else { throw .argument("subprotocol is not a token") }
        }
        for (name, value) in extraHeaders {
            guard HTTPSyntax.isToken(name) else { throw .argument("header name is not a token") }
            guard !reservedResponseHeaders.contains(HTTPSyntax.asciiLowercased(name)) else {
                throw .argument("header \(name) is written by the handshake itself")
            }
            guard HTTPSyntax.isValidFieldValue(value) else { throw .argument("value of \(name) contains a control character") }
        }
        // Written as bytes into one array (no intermediate strings): it runs on every handshake.
        var response: [UInt8] = []
        response.reserveCapacity(160)
        response += "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ".utf8
        appendAcceptValue(forKey: request.key, to: &response)
        response += "\r\n".utf8
        if let subprotocol {
            response += "Sec-WebSocket-Protocol: ".utf8
            response += subprotocol.utf8
            response += "\r\n".utf8
        }
        if let deflate {
            response += "Sec-WebSocket-Extensions: ".utf8
            response += deflate.headerValue.utf8
            response += "\r\n".utf8
        }
        for (name, value) in extraHeaders {
            response += name.utf8
            response += ": ".utf8
            response += value.utf8
            response += "\r\n".utf8
        }
        response += "\r\n".utf8
        return response
    }
}
