#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A peer's IP address without its port, in 16 bytes: what
/// ``WebSocketServerConfiguration/maxConnectionsPerAddress`` counts by. An IPv6 address is kept
/// whole; an IPv4 address is kept IPv4-mapped (`::ffff:a.b.c.d`), so that a client counts once
/// whether it reaches a dual-stack listener over IPv4 or as a mapped IPv6 address.
struct PeerAddressKey: Hashable, Sendable {
    /// The address's first 8 bytes, in network order read as a big-endian integer.
    let high: UInt64
    /// Its last 8 bytes.
    let low: UInt64
}

extension SocketAddress {
    /// The IP address without the port; nil for a family other than IPv4 and IPv6.
    var peerKey: PeerAddressKey? {
        withUnsafeBytes(of: storage) { raw -> PeerAddressKey? in
            switch family {
            case AF_INET:
                // sockaddr_in: family (2), port (2), address (4).
                let v4 = UInt32(bigEndian: raw.loadUnaligned(fromByteOffset: 4, as: UInt32.self))
                return PeerAddressKey(high: 0, low: 0x0000_FFFF_0000_0000 | UInt64(v4))
            case AF_INET6:
                // sockaddr_in6: family (2), port (2), flow label (4), address (16), scope (4).
                return PeerAddressKey(high: UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self)),
                                      low: UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 16, as: UInt64.self)))
            default:
                return nil
            }
        }
    }
}
