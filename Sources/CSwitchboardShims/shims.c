#define _GNU_SOURCE
#include "CSwitchboardShims.h"
int switchboard_shims_version(void) { return 1; }

#ifdef __linux__
#include <sys/socket.h>
int switchboard_accept_nonblocking(int fd, struct sockaddr *addr, socklen_t *len) {
    return accept4(fd, addr, len, SOCK_NONBLOCK | SOCK_CLOEXEC);
}
#endif

#include <errno.h>
#if defined(__linux__)
#include <sys/random.h>
#else
#include <stdlib.h>
#endif

// Per-thread, so no lock: each event loop thread (and any other thread) has its own pool.
// Bytes are handed out once and then overwritten, never reused.
static __thread uint64_t random_pool[32];
static __thread unsigned random_index = 32;

static int refill_random_pool(void) {
#if defined(__linux__)
    size_t filled = 0;
    while (filled < sizeof random_pool) {
        ssize_t n = getrandom((char *)random_pool + filled, sizeof random_pool - filled, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return 0;
        }
        filled += (size_t)n;
    }
    return 1;
#else
    arc4random_buf(random_pool, sizeof random_pool);
    return 1;
#endif
}

uint64_t switchboard_secure_random_u64(int *ok) {
    if (random_index >= 32) {
        if (!refill_random_pool()) { *ok = 0; return 0; }
        random_index = 0;
    }
    uint64_t value = random_pool[random_index];
    random_pool[random_index] = 0;
    random_index++;
    *ok = 1;
    return value;
}
