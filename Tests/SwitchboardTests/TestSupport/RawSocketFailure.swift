#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
@testable import Switchboard
import SwitchboardCore

/// What the hand-written test peers (``ServerRawSocket``, ``FloodPeer``) throw: a plain message.
struct RawSocketFailure: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

/// The status code of a close frame's payload (RFC 6455 §5.5.1), or nil when it has none.
func closeFrameCode(opcode: UInt8, payload: some Collection<UInt8>) -> Int? {
    guard opcode == 0x8, payload.count >= 2 else { return nil }
    let first = payload.first ?? 0, second = payload.dropFirst().first ?? 0
    return Int(first) << 8 | Int(second)
}

/// Connects `fd` (a TCP socket) to 127.0.0.1:`port`, blocking. On failure closes `fd` and throws.
func connectToLoopback(_ fd: Int32, port: Int) throws(RawSocketFailure) {
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = in_port_t(UInt16(truncatingIfNeeded: port).bigEndian)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    let rc = withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            systemConnect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    guard rc == 0 else {
        let e = errno
        systemClose(fd)
        throw RawSocketFailure("connect: errno \(e)")
    }
}
