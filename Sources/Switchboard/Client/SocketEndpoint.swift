import Foundation
import SwitchboardCore

/// Where and how to open a WebSocket connection.
///
/// Conform an enum or struct to describe your service's environments; only ``host`` is
/// required, everything else has a default. Query values are percent-encoded with the RFC 3986
/// unreserved set; header values containing CR or LF are rejected when connecting.
public protocol SocketEndpoint: Sendable {
    /// `.ws` or `.wss` (default `.wss`).
    var scheme: SocketScheme { get }
    /// The host name or IP address to connect to (IPv6 without brackets); the only requirement
    /// without a default. Also used for SNI and certificate verification unless
    /// ``TLSConfiguration/serverNameOverride`` is set.
    var host: String { get }
    /// Default: 80 for `ws`, 443 for `wss`.
    var port: Int { get }
    /// Request path, starting with `/` (default `/`). Not percent-encoded for you: pass it encoded.
    var path: String { get }
    /// Query items appended to the path, encoded with the RFC 3986 unreserved set.
    var queryItems: [(name: String, value: String)] { get }
    /// Extra request headers (e.g. `Authorization`). Values are never logged.
    var headers: [(name: String, value: String)] { get }
    /// Client TLS settings for `wss` (default: verify chain and hostname against the system store).
    var tls: TLSConfiguration { get }
    /// Subprotocols to offer, in preference order.
    var subprotocols: [String] { get }
    /// `Origin` header to send, if any.
    var origin: String? { get }
    /// TCP connect timeout per address (default 10 s).
    var connectTimeout: Duration { get }
    /// How the server is reached: directly (default ``ProxyConfiguration/none``), through a given
    /// HTTP `CONNECT` proxy, or through the one the environment names
    /// (``ProxyConfiguration/environment``).
    var proxy: ProxyConfiguration { get }
    /// Limits and timeouts of the connection.
    var configuration: WebSocketConfiguration { get }
}

/// `ws` (plain TCP) or `wss` (TLS).
public enum SocketScheme: String, Sendable {
    /// `ws`: plain TCP, default port 80.
    case ws
    /// `wss`: TLS, default port 443.
    case wss
}

extension SocketEndpoint {
    /// Default: `.wss`.
    public var scheme: SocketScheme { .wss }
    /// Default: 443 for `wss`, 80 for `ws`.
    public var port: Int { scheme == .wss ? 443 : 80 }
    /// Default: `/`.
    public var path: String { "/" }
    /// Default: none.
    public var queryItems: [(name: String, value: String)] { [] }
    /// Default: none.
    public var headers: [(name: String, value: String)] { [] }
    /// Default: ``TLSConfiguration/default`` (verify the chain and the host name).
    public var tls: TLSConfiguration { .default }
    /// Default: none offered.
    public var subprotocols: [String] { [] }
    /// Default: no `Origin` header.
    public var origin: String? { nil }
    /// Default: 10 seconds.
    public var connectTimeout: Duration { .seconds(10) }
    /// Default: ``ProxyConfiguration/none`` (a direct connection).
    public var proxy: ProxyConfiguration { .none }
    /// Default: ``WebSocketConfiguration/default``.
    public var configuration: WebSocketConfiguration { .default }

    /// The URL for descriptions and logs: `ws[s]://host:port/path?query` with the value of every
    /// secret query item (`URLRedaction` in `SwitchboardCore`, e.g. `token=<redacted>`) hidden;
    /// IPv6 hosts in brackets. Headers are never part of it.
    public var redactedURL: String {
        let bracketedHost = host.contains(":") ? "[\(host)]" : host
        return URLRedaction.redacting("\(scheme.rawValue)://\(bracketedHost):\(port)\(requestTarget)")
    }

    /// Path plus encoded query: what goes on the request line.
    package var requestTarget: String {
        var target = path.isEmpty ? "/" : path
        let items = queryItems
        if !items.isEmpty {
            target += target.contains("?") ? "&" : "?"
            target += items.map { "\(PercentEncoding.encode($0.name))=\(PercentEncoding.encode($0.value))" }
                .joined(separator: "&")
        }
        return target
    }

    func clientOptions() throws(SwitchboardError) -> WebSocketClientOptions {
        guard !host.isEmpty else { throw .invalidArgument("endpoint host is empty") }
        guard (1...65535).contains(port) else { throw .invalidArgument("endpoint port \(port) out of range") }
        guard path.isEmpty || path.hasPrefix("/") else { throw .invalidArgument("endpoint path must start with /") }
        for (name, value) in headers {
            if name.utf8.contains(where: { $0 == 13 || $0 == 10 || $0 == 0 || $0 == 58 || $0 == 32 }) || name.isEmpty {
                throw .invalidArgument("invalid header name \(name.debugDescription)")
            }
            if value.utf8.contains(where: { $0 == 13 || $0 == 10 || $0 == 0 }) {
                throw .invalidArgument("header \(name) contains CR, LF or NUL")
            }
        }
        let proxyServer = try proxy.server(for: scheme, host: host, port: port)
        return WebSocketClientOptions(host: host, port: port, useTLS: scheme == .wss, target: requestTarget,
                                      headers: headers.map { ($0.name, $0.value) }, subprotocols: subprotocols,
                                      origin: origin, tls: tls, connectTimeout: connectTimeout,
                                      configuration: configuration, proxy: proxyServer)
    }
}

/// RFC 3986 percent-encoding.
package enum PercentEncoding {
    /// Encodes every byte outside the unreserved set `A–Z a–z 0–9 - . _ ~`.
    package static func encode(_ string: String) -> String {
        var out = ""
        out.reserveCapacity(string.utf8.count)
        let hex: [Character] = Array("0123456789ABCDEF")
        for b in string.utf8 {
            switch b {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."),
                 UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(Character(UnicodeScalar(b)))
            default:
                out.append("%")
                out.append(hex[Int(b >> 4)])
                out.append(hex[Int(b & 0xF)])
            }
        }
        return out
    }
}
