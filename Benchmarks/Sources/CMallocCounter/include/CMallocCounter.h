#ifndef SWITCHBOARD_CMALLOCCOUNTER_H
#define SWITCHBOARD_CMALLOCCOUNTER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Number of heap allocations made by this process so far (all threads).
///
/// Counts every call of malloc, calloc, realloc (except realloc(p, 0), which frees),
/// reallocarray, posix_memalign, aligned_alloc, memalign, valloc and pvalloc. The counter
/// works by defining those symbols in the executable that links this target, which on glibc
/// interposes them for every shared library too (libswiftCore, Foundation, libc itself);
/// each definition forwards to glibc's `__libc_*` entry points, so `free` and
/// `malloc_usable_size` need no interposition.
uint64_t switchboard_malloc_count(void);

/// 1 when the interposed allocator is the one the process actually uses (an allocation made
/// through libc's dynamic symbol raised the counter), 0 otherwise.
int switchboard_malloc_counter_is_active(void);

/// Bytes of heap in use now (glibc's `mallinfo2().uordblks`), 0 elsewhere.
uint64_t switchboard_heap_in_use(void);

#ifdef __cplusplus
}
#endif

#endif
