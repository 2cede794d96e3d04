/// Negotiation of the permessage-deflate extension (RFC 7692 §5, §7.1): the server's choice
/// among the client's offers, the client's offer, and the client's check of the answer.
///
/// Window sizes: zlib cannot compress with a 256-byte window (8 bits; it silently uses 9), so
/// a server declines offers that demand `server_max_window_bits=8`, and a client fails a
/// handshake whose answer demands `client_max_window_bits=8`. Decompressing any window up to
/// 15 bits works.
public enum PerMessageDeflate {
    /// `permessage-deflate`.
    public static let extensionName = "permessage-deflate"

    /// The trailer every compressed message loses before it is sent and regains before it is
    /// inflated (§7.2.1, §7.2.2): an empty stored block's `00 00 ff ff`.
    static let tail: [UInt8] = [0x00, 0x00, 0xFF, 0xFF]

    /// What a client offered in one `permessage-deflate` element.
    struct Offer: Equatable {
        var serverNoContextTakeover = false
        var clientNoContextTakeover = false
        var serverMaxWindowBits: Int?
        /// `client_max_window_bits` present; its value if it had one.
        var clientMaxWindowBitsOffered = false
        var clientMaxWindowBits: Int?

        /// Reads one element's parameters; nil when §7.1 says to decline it (an unknown or
        /// repeated parameter, a missing or invalid value).
        init?(_ element: WebSocketExtension) {
            var seen: Set<String> = []
            for p in element.parameters {
                let name = HTTPSyntax.asciiLowercased(p.name)
                guard seen.insert(name).inserted else { return nil }
                switch name {
                case "server_no_context_takeover":
                    guard p.value == nil else { return nil }
                    serverNoContextTakeover = true
                case "client_no_context_takeover":
                    guard p.value == nil else { return nil }
                    clientNoContextTakeover = true
                case "server_max_window_bits":
                    guard let bits = PerMessageDeflate.windowBits(p.value) else { return nil }
                    serverMaxWindowBits = bits
                case "client_max_window_bits":
                    clientMaxWindowBitsOffered = true
                    if let value = p.value {
                        guard let bits = PerMessageDeflate.windowBits(value) else { return nil }
                        clientMaxWindowBits = bits
                    }
                default:
                    return nil
                }
            }
        }
    }

    /// A window-bits value: a decimal 8–15 without leading zeros (§7.1.2).
    static func windowBits(_ value: String?) -> Int? {
        guard let value, let bits = Int(value), (8...15).contains(bits), value.utf8.first != UInt8(ascii: "0")
        else { return nil }
        return bits
    }

    /// Server side: the parameters to answer for the first acceptable `permessage-deflate`
    /// offer among `fieldValues` (every `Sec-WebSocket-Extensions` field of the request, in
    /// order), or nil to decline them all (the connection then goes uncompressed: declining is
    /// not an error). Offers of other extensions are ignored, and so is a header that breaks the
    /// grammar.
    ///
    /// The answer follows `configuration`: without context takeover it always says
    /// `server_no_context_takeover; client_no_context_takeover`; with it, the server keeps its
    /// context unless the client asked otherwise, and limits the client's window to the
    /// configured bits when the client allowed that. A `server_max_window_bits` the client
    /// asked for is honoured (answered with the same or a smaller value).
    public static func accept(offers fieldValues: [String], configuration: PerMessageDeflateConfiguration) -> PerMessageDeflateParameters? {
        guard !fieldValues.isEmpty, let elements = WebSocketExtension.parse(fieldValues) else { return nil }
        for element in elements where HTTPSyntax.asciiLowercased(element.name) == extensionName {
            guard let offer = Offer(element) else { continue }
            // zlib cannot honour an 8-bit compression window.
            if offer.serverMaxWindowBits == 8 { continue }
            let ownBits = configuration.windowBits
            var serverBits: Int?
            if let asked = offer.serverMaxWindowBits { serverBits = min(asked, ownBits) }
            switch configuration.mode {
            case .noContextTakeover:
                return PerMessageDeflateParameters(serverNoContextTakeover: true, clientNoContextTakeover: true,
                                                   serverMaxWindowBits: serverBits, clientMaxWindowBits: nil)
            case .contextTakeover:
                var clientBits: Int?
                if offer.clientMaxWindowBitsOffered && !offer.clientNoContextTakeover {
                    // Our decompressor's window only needs to be as large as the client's.
                    clientBits = min(offer.clientMaxWindowBits ?? 15, ownBits)
                }
                return PerMessageDeflateParameters(serverNoContextTakeover: offer.serverNoContextTakeover,
                                                   clientNoContextTakeover: offer.clientNoContextTakeover,
                                                   serverMaxWindowBits: serverBits, clientMaxWindowBits: clientBits)
            }
        }
        return nil
    }

    /// Client side: the `Sec-WebSocket-Extensions` element to offer for `configuration`.
    ///
    /// Without context takeover: `permessage-deflate; server_no_context_takeover;
    /// client_no_context_takeover; client_max_window_bits`. With it:
    /// `permessage-deflate; client_max_window_bits`, plus `=N` below 15 bits (the value a
    /// server may lower further).
    public static func offer(for configuration: PerMessageDeflateConfiguration) -> WebSocketExtension {
        switch configuration.mode {
        case .noContextTakeover:
            return WebSocketExtension(name: extensionName, parameters: [
                .init(name: "server_no_context_takeover"), .init(name: "client_no_context_takeover"),
                .init(name: "client_max_window_bits"),
            ])
        case .contextTakeover:
            let bits = configuration.windowBits
            return WebSocketExtension(name: extensionName, parameters: [
                .init(name: "client_max_window_bits", value: bits < 15 ? String(bits) : nil),
            ])
        }
    }

    /// Client side: checks the server's `Sec-WebSocket-Extensions` answer against the offer
    /// made for `configuration` (nil: nothing offered).
    ///
    /// - Returns: the negotiated parameters, or nil when the server declined.
    /// - Throws: ``WebSocketHandshakeError/unexpectedExtension`` (with the reason in its
    ///   description) when the answer names anything but `permessage-deflate`, names it twice,
    ///   answers an extension that was not offered, or carries a parameter §7.1 forbids there:
    ///   unknown, repeated, an invalid window size, `client_max_window_bits` the client did not
    ///   offer, or a window larger than offered. Also when it demands
    ///   `client_max_window_bits=8`, which zlib cannot honour.
    public static func validate(answer fieldValues: [String], offered configuration: PerMessageDeflateConfiguration?) throws(WebSocketHandshakeError) -> PerMessageDeflateParameters? {
        guard !fieldValues.isEmpty else { return nil }
        guard let elements = WebSocketExtension.parse(fieldValues) else {
            throw .unexpectedExtension("malformed Sec-WebSocket-Extensions")
        }
        if elements.isEmpty { return nil }
        guard let configuration else { throw .unexpectedExtension(elements[0].name) }
        guard elements.count == 1, HTTPSyntax.asciiLowercased(elements[0].name) == extensionName else {
            throw .unexpectedExtension(elements.map(\.name).joined(separator: ", "))
        }
        var parameters = PerMessageDeflateParameters()
        var seen: Set<String> = []
        let offered = offer(for: configuration)
        let offeredClientBits = offered.parameters.first { $0.name == "client_max_window_bits" }
        for p in elements[0].parameters {
            let name = HTTPSyntax.asciiLowercased(p.name)
            guard seen.insert(name).inserted else { throw .unexpectedExtension("repeated \(name)") }
            switch name {
            case "server_no_context_takeover":
                guard p.value == nil else { throw .unexpectedExtension("\(name) with a value") }
                parameters.serverNoContextTakeover = true
            case "client_no_context_takeover":
                guard p.value == nil else { throw .unexpectedExtension("\(name) with a value") }
                parameters.clientNoContextTakeover = true
            case "server_max_window_bits":
                guard let bits = windowBits(p.value) else { throw .unexpectedExtension("invalid \(name)") }
                parameters.serverMaxWindowBits = bits
                parameters.serverMaxWindowBitsStated = true
            case "client_max_window_bits":
                guard let offeredClientBits else { throw .unexpectedExtension("\(name) was not offered") }
                // RFC 7692 wants a value here; a bare parameter is read as 15 (no limit).
                let bits: Int
                if let value = p.value {
                    guard let parsed = windowBits(value) else { throw .unexpectedExtension("invalid \(name)") }
                    bits = parsed
                } else {
                    bits = 15
                }
                if let limit = offeredClientBits.value.flatMap({ Int($0) }), bits > limit {
                    throw .unexpectedExtension("\(name)=\(bits) above the offered \(limit)")
                }
                guard bits > 8 else { throw .unexpectedExtension("\(name)=8 cannot be honoured by zlib") }
                parameters.clientMaxWindowBits = bits
                parameters.clientMaxWindowBitsStated = true
            default:
                throw .unexpectedExtension("unknown parameter \(name)")
            }
        }
        return parameters
    }
}
