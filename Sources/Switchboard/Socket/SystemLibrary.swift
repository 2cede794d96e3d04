#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import CSwitchboardShims

// One spelling of the C library for Glibc and Musl.
//
// Two things differ between them in Swift:
// - the module name: `Glibc.close(fd)` does not compile on Musl. A type with its own `close`,
//   `read`, `connect` or `send` member cannot call the C function unqualified either (the
//   member hides it), so it calls the `system…` functions below;
// - constants that Glibc imports as enums (`SOCK_STREAM.rawValue`, `EPOLLIN.rawValue`) and Musl
//   as plain integer macros: use ``SystemConstants``.
//
// Every other file imports the C library with the same lines as above (Glibc, Musl, Darwin),
// imports `CSwitchboardShims` unconditionally where it needs epoll, eventfd or accept4 (the
// shim header includes them on Linux, whatever the libc), and uses only spellings that are the
// same in both.

/// `connect(2)`.
@inline(__always)
func systemConnect(_ fd: Int32, _ address: UnsafePointer<sockaddr>, _ length: socklen_t) -> Int32 {
    connect(fd, address, length)
}

/// `read(2)`.
@inline(__always)
func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int {
    read(fd, buffer, count)
}

/// `send(2)`.
@inline(__always)
func systemSend(_ fd: Int32, _ buffer: UnsafeRawPointer?, _ count: Int, _ flags: Int32) -> Int {
    send(fd, buffer, count, flags)
}

/// `close(2)`.
@inline(__always) @discardableResult
func systemClose(_ fd: Int32) -> Int32 {
    close(fd)
}

/// C constants with one type whatever the libc (Glibc imports them as enums, Musl as macros).
enum SystemConstants {
    #if canImport(Glibc)
    /// `SOCK_STREAM`.
    static var streamSocket: Int32 { Int32(SOCK_STREAM.rawValue) }
    /// `SOCK_NONBLOCK`.
    static var nonBlockingSocket: Int32 { Int32(SOCK_NONBLOCK.rawValue) }
    /// `SOCK_CLOEXEC`.
    static var closeOnExecSocket: Int32 { Int32(SOCK_CLOEXEC.rawValue) }
    /// `EPOLLIN`.
    static var epollIn: UInt32 { EPOLLIN.rawValue }
    /// `EPOLLOUT`.
    static var epollOut: UInt32 { EPOLLOUT.rawValue }
    /// `EPOLLERR`.
    static var epollErr: UInt32 { EPOLLERR.rawValue }
    /// `EPOLLHUP`.
    static var epollHup: UInt32 { EPOLLHUP.rawValue }
    /// `EPOLLRDHUP`.
    static var epollRdHup: UInt32 { EPOLLRDHUP.rawValue }
    #elseif canImport(Musl)
    static var streamSocket: Int32 { Int32(SOCK_STREAM) }
    static var nonBlockingSocket: Int32 { Int32(SOCK_NONBLOCK) }
    static var closeOnExecSocket: Int32 { Int32(SOCK_CLOEXEC) }
    static var epollIn: UInt32 { UInt32(EPOLLIN) }
    static var epollOut: UInt32 { UInt32(EPOLLOUT) }
    static var epollErr: UInt32 { UInt32(EPOLLERR) }
    static var epollHup: UInt32 { UInt32(EPOLLHUP) }
    static var epollRdHup: UInt32 { UInt32(EPOLLRDHUP) }
    #endif
}
