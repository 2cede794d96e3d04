// Counts heap allocations in-process on glibc by interposing the allocation functions.
//
// An executable that defines `malloc` and friends exports them in its dynamic symbol table
// (the shared libraries it links reference them), so the dynamic linker binds every
// library's calls to these definitions. Each one bumps a relaxed atomic counter and forwards
// to glibc's own allocator through its public `__libc_*` aliases, so the memory is ordinary
// glibc heap memory: glibc's `free`, `realloc` and `malloc_usable_size` accept it unchanged.
//
// Linux/glibc only: elsewhere this file compiles to the counter alone, always reading 0.

#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // RTLD_DEFAULT, reallocarray
#endif

#include "CMallocCounter.h"

#if defined(__linux__) && defined(__GLIBC__)

#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *pointer, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void *__libc_valloc(size_t size);
extern void *__libc_pvalloc(size_t size);

static _Atomic uint64_t allocation_count = 0;

static inline void count_one(void) {
    atomic_fetch_add_explicit(&allocation_count, 1, memory_order_relaxed);
}

uint64_t switchboard_malloc_count(void) {
    return atomic_load_explicit(&allocation_count, memory_order_relaxed);
}

void *malloc(size_t size) {
    count_one();
    return __libc_malloc(size);
}

void *calloc(size_t count, size_t size) {
    count_one();
    return __libc_calloc(count, size);
}

void *realloc(void *pointer, size_t size) {
    // realloc(p, 0) with p != NULL frees (glibc); anything else (re)allocates.
    if (pointer == NULL || size != 0) count_one();
    return __libc_realloc(pointer, size);
}

void *reallocarray(void *pointer, size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(pointer, total);
}

static int is_power_of_two(size_t value) {
    return value != 0 && (value & (value - 1)) == 0;
}

int posix_memalign(void **result, size_t alignment, size_t size) {
    // POSIX: a power of two multiple of sizeof(void *); errors are returned, errno untouched.
    if (!is_power_of_two(alignment) || alignment % sizeof(void *) != 0) return EINVAL;
    count_one();
    int saved = errno;
    void *pointer = __libc_memalign(alignment, size);
    errno = saved;
    if (pointer == NULL) return ENOMEM;
    *result = pointer;
    return 0;
}

void *aligned_alloc(size_t alignment, size_t size) {
    // glibc (since 2.38) rejects non-power-of-two alignments; do so on every version.
    if (!is_power_of_two(alignment)) {
        errno = EINVAL;
        return NULL;
    }
    count_one();
    return __libc_memalign(alignment, size);
}

void *memalign(size_t alignment, size_t size) {
    count_one();
    return __libc_memalign(alignment, size);
}

void *valloc(size_t size) {
    count_one();
    return __libc_valloc(size);
}

void *pvalloc(size_t size) {
    count_one();
    return __libc_pvalloc(size);
}

int switchboard_malloc_counter_is_active(void) {
    // Call malloc through the symbol the dynamic linker resolves for everyone else: if it is
    // ours the counter moves. (A direct call here would always bind to our definition.)
    void *(*resolved)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "malloc");
    if (resolved == NULL) return 0;
    uint64_t before = switchboard_malloc_count();
    void *pointer = resolved(16);
    uint64_t after = switchboard_malloc_count();
    free(pointer);
    return after > before;
}

#else

uint64_t switchboard_malloc_count(void) { return 0; }
int switchboard_malloc_counter_is_active(void) { return 0; }

#endif

#if defined(__linux__) && defined(__GLIBC__)
#include <malloc.h>
uint64_t switchboard_heap_in_use(void) { return (uint64_t)mallinfo2().uordblks; }
#else
uint64_t switchboard_heap_in_use(void) { return 0; }
#endif
