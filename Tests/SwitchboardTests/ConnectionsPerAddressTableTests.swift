#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Testing
@testable import Switchboard

/// The per-address table behind `maxConnectionsPerAddress`, and the address it counts by.
@Suite("Server: connections per address table")
struct ConnectionsPerAddressTableTests {
    static func address(_ text: String, port: UInt16) -> SocketAddress {
        var storage = sockaddr_storage()
        if text.contains(":") {
            var a = sockaddr_in6()
            a.sin6_family = sa_family_t(AF_INET6)
            a.sin6_port = port.bigEndian
            _ = inet_pton(AF_INET6, text, &a.sin6_addr)
            withUnsafeMutableBytes(of: &storage) { dst in withUnsafeBytes(of: a) { dst.copyMemory(from: $0) } }
            return SocketAddress(storage: storage, length: socklen_t(MemoryLayout<sockaddr_in6>.size))
        }
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_port = port.bigEndian
        _ = inet_pton(AF_INET, text, &a.sin_addr)
        withUnsafeMutableBytes(of: &storage) { dst in withUnsafeBytes(of: a) { dst.copyMemory(from: $0) } }
        return SocketAddress(storage: storage, length: socklen_t(MemoryLayout<sockaddr_in>.size))
    }

    /// The peer's text (`request.remoteAddress`, logs): IPv4 formatted by hand, as `inet_ntop`
    /// would, for every octet value in every position; IPv6 by `inet_ntop`.
    @Test func hostTextIsInetNtopsText() {
        for octet in 0...255 {
            for text in ["\(octet).0.0.0", "1.\(octet).2.3", "255.255.\(octet).9", "10.0.100.\(octet)"] {
                #expect(Self.address(text, port: 80).host == text)
            }
        }
        #expect(Self.address("127.0.0.1", port: 8080).description == "127.0.0.1:8080")
        #expect(Self.address("::1", port: 443).host == "::1")
        #expect(Self.address("2001:db8::ff00:42:8329", port: 443).description == "[2001:db8::ff00:42:8329]:443")
        #expect(Self.address("::ffff:10.0.0.1", port: 1).host == "::ffff:10.0.0.1")
        #expect(SocketAddress(storage: sockaddr_storage(), length: 0).host == "?")
    }

    @Test func addressesCountWithoutTheirPortAndIPv6ByTheFullAddress() throws {
        let a = try #require(Self.address("10.0.0.1", port: 1000).peerKey)
        #expect(Self.address("10.0.0.1", port: 2000).peerKey == a)
        #expect(Self.address("10.0.0.2", port: 1000).peerKey != a)
        // An IPv4-mapped IPv6 address is its IPv4 address.
        #expect(Self.address("::ffff:10.0.0.1", port: 3000).peerKey == a)
        let v6 = try #require(Self.address("2001:db8::1", port: 1000).peerKey)
        #expect(Self.address("2001:db8::1", port: 2000).peerKey == v6)
        #expect(Self.address("2001:db8::2", port: 1000).peerKey != v6)       // the last bit
        #expect(Self.address("2001:db9::1", port: 1000).peerKey != v6)       // the first half
        #expect(v6 != a)
    }

    @Test func anAddressIsAdmittedUpToTheLimitAndForgottenAtZero() throws {
        let a = try #require(Self.address("10.0.0.1", port: 1).peerKey)
        let b = try #require(Self.address("10.0.0.2", port: 1).peerKey)
        var table = ConnectionsPerAddress()
        let admitted = [table.admit(a, limit: 2), table.admit(a, limit: 2), table.admit(a, limit: 2),
                        table.admit(b, limit: 2)]
        #expect(admitted == [true, true, false, true])
        #expect(table.count(of: a) == 2)
        #expect(table.addresses == 2)
        table.release(a)
        let again = table.admit(a, limit: 2)
        #expect(again)
        table.release(a)
        table.release(a)
        table.release(b)
        #expect(table.addresses == 0)
        table.release(b)                                  // an extra release changes nothing
        #expect(table.addresses == 0)
        let withZeroLimit = table.admit(a, limit: 0)       // a zero limit admits nobody, keeps nothing
        #expect(!withZeroLimit)
        #expect(table.addresses == 0)
    }
}
