#define _GNU_SOURCE
#include "CSwitchboardShims.h"
int switchboard_shims_version(void) { return 1; }

#ifdef __linux__
#include <sys/socket.h>
int switchboard_accept_nonblocking(int fd, struct sockaddr *addr, socklen_t *len) {
    return accept4(fd, addr, len, SOCK_NONBLOCK | SOCK_CLOEXEC);
}
#endif
