#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation

/// An IPv4 or IPv6 socket address.
package struct SocketAddress: Sendable, CustomStringConvertible {
    var storage: sockaddr_storage
    var length: socklen_t

    init(storage: sockaddr_storage, length: socklen_t) {
        self.storage = storage
        self.length = length
    }

    /// The address family (`AF_INET` or `AF_INET6`).
    var family: Int32 { Int32(storage.ss_family) }

    /// The port number in host byte order.
    package var port: Int {
        withUnsafeBytes(of: storage) { raw -> Int in
            switch Int32(storage.ss_family) {
            case AF_INET: return Int(UInt16(bigEndian: raw.load(fromByteOffset: 2, as: UInt16.self)))
            case AF_INET6: return Int(UInt16(bigEndian: raw.load(fromByteOffset: 2, as: UInt16.self)))
            default: return 0
            }
        }
    }

    /// Numeric host text, e.g. `127.0.0.1` or `::1`. IPv4 is formatted here (it is asked for
    /// on every accepted connection; at most 15 bytes, a string that needs no allocation),
    /// IPv6 by `inet_ntop`.
    package var host: String {
        withUnsafeBytes(of: storage) { raw -> String in
            switch Int32(storage.ss_family) {
            case AF_INET:
                return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 16) { text in
                    var count = 0
                    for i in 0..<4 {
                        if i > 0 { text[count] = UInt8(ascii: "."); count += 1 }
                        let octet = raw[4 + i]
                        if octet >= 100 { text[count] = UInt8(ascii: "0") + octet / 100; count += 1 }
                        if octet >= 10 { text[count] = UInt8(ascii: "0") + octet / 10 % 10; count += 1 }
                        text[count] = UInt8(ascii: "0") + octet % 10; count += 1
                    }
                    return String(decoding: UnsafeBufferPointer(rebasing: text[0..<count]), as: UTF8.self)
                }
            case AF_INET6:
                return withUnsafeTemporaryAllocation(of: CChar.self, capacity: Int(INET6_ADDRSTRLEN) + 1) { text in
                    guard let base = text.baseAddress, let source = raw.baseAddress,
                          inet_ntop(AF_INET6, source + 8, base, socklen_t(text.count)) != nil else { return "?" }
                    return String(cString: base)
                }
            default:
                return "?"
            }
        }
    }

    package var description: String {
        family == AF_INET6 ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    /// Resolves `host`:`port` with `getaddrinfo` (TCP, IPv4 and IPv6, in the resolver's order).
    /// Blocking: call it off the event loops (``resolve(host:port:)`` does).
    static func resolveBlocking(host: String, port: Int) throws(SwitchboardError) -> [SocketAddress] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = SystemConstants.streamSocket
        hints.ai_flags = AI_ADDRCONFIG
        var result: UnsafeMutablePointer<addrinfo>?
        // Bracketed IPv6 literals arrive without brackets here.
        let rc = getaddrinfo(host, String(port), &hints, &result)
        guard rc == 0, let first = result else {
            let message = rc == 0 ? "no addresses" : String(cString: gai_strerror(rc))
            throw SwitchboardError.dns(host: host, message: message)
        }
        defer { freeaddrinfo(first) }
        var out: [SocketAddress] = []
        var cur: UnsafeMutablePointer<addrinfo>? = first
        while let ai = cur {
            if let addr = ai.pointee.ai_addr, ai.pointee.ai_addrlen <= socklen_t(MemoryLayout<sockaddr_storage>.size) {
                var storage = sockaddr_storage()
                withUnsafeMutableBytes(of: &storage) { dst in
                    dst.copyMemory(from: UnsafeRawBufferPointer(start: addr, count: Int(ai.pointee.ai_addrlen)))
                }
                out.append(SocketAddress(storage: storage, length: ai.pointee.ai_addrlen))
            }
            cur = ai.pointee.ai_next
        }
        if out.isEmpty { throw SwitchboardError.dns(host: host, message: "no addresses") }
        return out
    }

    /// Resolves off the cooperative pool (getaddrinfo blocks), honouring task cancellation.
    static func resolve(host: String, port: Int) async throws -> [SocketAddress] {
        try Task.checkCancellation()
        return try await withCheckedThrowingContinuation { (cont: CheckedContinuation<[SocketAddress], Error>) in
            DispatchQueue.global().async {
                do {
                    cont.resume(returning: try resolveBlocking(host: host, port: port))
                } catch {
                    cont.resume(throwing: error)
                }
            }
        }
    }
}

extension SocketAddress {
    /// `host` without the brackets a URL puts around an IPv6 literal (`[::1]` → `::1`); any
    /// other text, including a lone `[`, comes back unchanged. The one place that strips them,
    /// for resolving, TLS server names and endpoints.
    package static func hostWithoutBrackets(_ host: String) -> String {
        guard host.hasPrefix("["), host.hasSuffix("]"), host.count >= 2 else { return host }
        return String(host.dropFirst().dropLast())
    }
}
