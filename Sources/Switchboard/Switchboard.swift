// Switchboard: WebSocket client and server over POSIX sockets, epoll and OpenSSL.
//
// The protocol vocabulary (messages, close codes, HTTP heads, upgrade requests) lives in the
// sans-I/O module SwitchboardCore; code that names those types imports both modules:
//
//     import Switchboard
//     import SwitchboardCore
