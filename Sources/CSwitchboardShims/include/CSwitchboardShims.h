#ifndef SWITCHBOARD_SHIMS_H
#define SWITCHBOARD_SHIMS_H
// C helpers for things Swift cannot import directly (function-like macros).
int switchboard_shims_version(void);

#ifdef __linux__
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
/// accept4(fd, addr, len, SOCK_NONBLOCK | SOCK_CLOEXEC): Glibc hides accept4 behind _GNU_SOURCE.
int switchboard_accept_nonblocking(int fd, struct sockaddr *addr, socklen_t *len);
#endif
#include <stdint.h>
/// 64 bits from the system CSPRNG, served from a per-thread pool of 256 bytes that is refilled
/// with one getrandom(2) call (instead of one system call per value). Returns 0 in *ok only if
/// the system generator failed, in which case the value must not be used.
uint64_t switchboard_secure_random_u64(int *ok);
/// Shutdown signals (ShutdownSignal): installs, for `signal`, a handler that writes the signal's
/// number as one byte to the descriptor last given to switchboard_signal_forward_to (nothing
/// while that is -1), keeping errno. The previous disposition is stored in `*previous` (an
/// opaque buffer of switchboard_signal_action_size() bytes) and comes back with
/// switchboard_signal_restore. Return 0, or -1 with errno set.
void switchboard_signal_forward_to(int fd);
unsigned long switchboard_signal_action_size(void);
int switchboard_signal_forward(int signal, void *previous);
int switchboard_signal_restore(int signal, const void *previous);
// TLS (OpenSSL macro wrappers).
#include "CSwitchboardTLSShims.h"
// io_uring (Linux).
#include "CSwitchboardURing.h"
#endif
