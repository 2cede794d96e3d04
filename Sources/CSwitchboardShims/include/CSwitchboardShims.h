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
// TLS (OpenSSL macro wrappers).
#include "CSwitchboardTLSShims.h"
#endif
