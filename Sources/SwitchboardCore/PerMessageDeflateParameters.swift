/// The permessage-deflate parameters both sides agreed on (RFC 7692 §7.1): what the server's
/// `Sec-WebSocket-Extensions` response said.
public struct PerMessageDeflateParameters: Sendable, Hashable {
    /// The server compresses every message on its own (§7.1.1.1).
    public var serverNoContextTakeover: Bool
    /// The client compresses every message on its own (§7.1.1.2).
    public var clientNoContextTakeover: Bool
    /// The largest LZ77 window the server compresses with, as a power of two (8–15; 15 when the
    /// response does not say, §7.1.2.1).
    public var serverMaxWindowBits: Int
    /// The largest LZ77 window the client compresses with (8–15; 15 when the response does not
    /// say, §7.1.2.2).
    public var clientMaxWindowBits: Int
    /// Whether the response carried `server_max_window_bits` (it is echoed as written).
    var serverMaxWindowBitsStated: Bool
    /// Whether the response carried `client_max_window_bits`.
    var clientMaxWindowBitsStated: Bool

    /// Parameters as a server would answer them; windows omitted mean 15.
    public init(serverNoContextTakeover: Bool = false, clientNoContextTakeover: Bool = false,
                serverMaxWindowBits: Int? = nil, clientMaxWindowBits: Int? = nil) {
        self.serverNoContextTakeover = serverNoContextTakeover
        self.clientNoContextTakeover = clientNoContextTakeover
        self.serverMaxWindowBits = serverMaxWindowBits ?? 15
        self.clientMaxWindowBits = clientMaxWindowBits ?? 15
        serverMaxWindowBitsStated = serverMaxWindowBits != nil
        clientMaxWindowBitsStated = clientMaxWindowBits != nil
    }

    /// The `Sec-WebSocket-Extensions` value of the server's response, e.g.
    /// `permessage-deflate; server_no_context_takeover; client_no_context_takeover`.
    public var headerValue: String {
        var value = PerMessageDeflate.extensionName
        if serverNoContextTakeover { value += "; server_no_context_takeover" }
        if clientNoContextTakeover { value += "; client_no_context_takeover" }
        if serverMaxWindowBitsStated { value += "; server_max_window_bits=\(serverMaxWindowBits)" }
        if clientMaxWindowBitsStated { value += "; client_max_window_bits=\(clientMaxWindowBits)" }
        return value
    }

    /// Whether the side in `role` resets its compressor after every message.
    func compressesWithoutContext(as role: WebSocketRole) -> Bool {
        role == .server ? serverNoContextTakeover : clientNoContextTakeover
    }

    /// The largest window the side in `role` may compress with.
    func maxWindowBits(of role: WebSocketRole) -> Int {
        role == .server ? serverMaxWindowBits : clientMaxWindowBits
    }
}
