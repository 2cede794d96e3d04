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
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

// The descriptor the handler writes to: read in the handler, so atomic (lock-free for int).
static atomic_int switchboard_signal_fd = -1;

static void switchboard_signal_handler(int signal) {
    int saved = errno;
    int fd = atomic_load(&switchboard_signal_fd);
    if (fd >= 0) {
        unsigned char byte = (unsigned char)signal;
        // The pipe is non-blocking: when full, the byte already there says the same.
        ssize_t ignored = write(fd, &byte, 1);
        (void)ignored;
    }
    errno = saved;
}

void switchboard_signal_forward_to(int fd) { atomic_store(&switchboard_signal_fd, fd); }

unsigned long switchboard_signal_action_size(void) { return sizeof(struct sigaction); }

int switchboard_signal_forward(int signal, void *previous) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = switchboard_signal_handler;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    return sigaction(signal, &action, (struct sigaction *)previous);
}

int switchboard_signal_restore(int signal, const void *previous) {
    return sigaction(signal, (const struct sigaction *)previous, NULL);
}

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
