/// An HTTP `CONNECT` tunnel through a proxy (RFC 9110 §9.3.6), sans I/O: the request to send
/// and what the proxy's answer means. The WebSocket handshake (and, for `wss`, TLS with the
/// target host) runs inside the tunnel once it is ``Outcome/established``.
public struct HTTPProxyTunnel: Sendable {
    /// What the proxy's answer to `CONNECT` means.
    public enum Outcome: Sendable, Equatable {
        /// A 2xx answer: the tunnel is up, bytes now go to the target.
        case established
        /// 407: the proxy wants credentials (none were sent) or refused the ones sent.
        case authenticationRequired(credentialsSent: Bool)
        /// Any other status: the proxy refused or could not reach the target (5xx: it could not
        /// connect, e.g. 502 or 504; 403: the target is not allowed).
        case refused(status: Int)
    }

    /// The target, `host:port` (IPv6 literals in brackets), as the request names it.
    public let authority: String
    /// Whether a `Proxy-Authorization` header is sent.
    public let sendsCredentials: Bool
    /// The whole request head.
    public let requestBytes: [UInt8]

    /// Builds the `CONNECT` request for `host`:`port`, with Basic credentials
    /// (`Proxy-Authorization`, RFC 7617) when `username` is non-nil.
    ///
    /// - Throws: ``HTTPProxyTunnelError`` for a host with characters that cannot appear in an
    ///   authority, a port outside 1...65535, or credentials with CR, LF or NUL (or a `:` in
    ///   the user name, which Basic cannot carry).
    public init(host: String, port: Int, username: String? = nil, password: String = "")
        throws(HTTPProxyTunnelError) {
        guard (1...65535).contains(port) else { throw .invalidTarget("port \(port) out of range") }
        guard !host.isEmpty, !host.utf8.contains(where: { $0 <= 32 || $0 == 127 || $0 == UInt8(ascii: "/")
                || $0 == UInt8(ascii: "@") || $0 == UInt8(ascii: "[") || $0 == UInt8(ascii: "]") }) else {
            throw .invalidTarget("invalid host \(host.debugDescription)")
        }
        let authority = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        var head = "CONNECT \(authority) HTTP/1.1\r\nHost: \(authority)\r\n"
        if let username {
            let forbidden: (UInt8) -> Bool = { $0 == 13 || $0 == 10 || $0 == 0 }
            guard !username.utf8.contains(where: forbidden), !password.utf8.contains(where: forbidden) else {
                throw .invalidCredentials("proxy credentials contain CR, LF or NUL")
            }
            guard !username.contains(":") else {
                throw .invalidCredentials("a proxy user name cannot contain ':' (Basic authentication)")
            }
            head += "Proxy-Authorization: Basic \(Base64.encode(Array("\(username):\(password)".utf8)))\r\n"
        }
        head += "\r\n"
        self.authority = authority
        self.sendsCredentials = username != nil
        self.requestBytes = Array(head.utf8)
    }

    /// Classifies the proxy's answer.
    public func outcome(of response: HTTPResponseHead) -> Outcome {
        switch response.status {
        case 200...299: .established
        case 407: .authenticationRequired(credentialsSent: sendsCredentials)
        default: .refused(status: response.status)
        }
    }
}

/// A `CONNECT` request that cannot be built. The message never contains the password.
public enum HTTPProxyTunnelError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The target host or port cannot be written in a request.
    case invalidTarget(String)
    /// The credentials cannot be sent.
    case invalidCredentials(String)

    /// What was wrong.
    public var description: String {
        switch self {
        case .invalidTarget(let message), .invalidCredentials(let message): message
        }
    }
}
