#define _GNU_SOURCE
#include "CSpawnShims.h"
#include <errno.h>

int cspawn_add_closefrom(posix_spawn_file_actions_t *actions, int lowest) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    return posix_spawn_file_actions_addclosefrom_np(actions, lowest);
#else
    (void)actions;
    (void)lowest;
    return ENOSYS;
#endif
}

int cspawn_add_chdir(posix_spawn_file_actions_t *actions, const char *directory) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 29)) || defined(__APPLE__)
    return posix_spawn_file_actions_addchdir_np(actions, directory);
#else
    (void)actions;
    (void)directory;
    return ENOSYS;
#endif
}
