import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Descriptors of this process that are TCP sockets with `port` at either end, not listening.
func processSocketCount(port: Int) -> Int {
    // procfs files report size 0: read to EOF with plain read(2).
    let fd = open("/proc/net/tcp", O_RDONLY)
    guard fd >= 0 else { return -1 }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 1 << 16)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n <= 0 { break }
        bytes += chunk[0..<n]
    }
    let table = String(decoding: bytes, as: UTF8.self)
    var inodes = Set<String>()
    for line in table.split(separator: "\n").dropFirst() {
        let cols = line.split(separator: " ", omittingEmptySubsequences: true)
        guard cols.count > 9, cols[3] != "0A" else { continue }
        let ports = [cols[1], cols[2]].compactMap { $0.split(separator: ":").last.flatMap { Int($0, radix: 16) } }
        if ports.contains(port) { inodes.insert(String(cols[9])) }
    }
    guard let fds = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return -1 }
    var count = 0
    for fd in fds {
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)"),
              target.hasPrefix("socket:[") else { continue }
        if inodes.contains(String(target.dropFirst(8).dropLast())) { count += 1 }
    }
    return count
}
