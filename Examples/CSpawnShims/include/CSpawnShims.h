#ifndef CSPAWN_SHIMS_H
#define CSPAWN_SHIMS_H

#include <spawn.h>

/// Adds "close every descriptor from `lowest` up" to `actions` (glibc's
/// posix_spawn_file_actions_addclosefrom_np, which Swift's Glibc module does not import).
/// Returns 0, or an errno value (ENOSYS where the C library has no such action).
int cspawn_add_closefrom(posix_spawn_file_actions_t *actions, int lowest);

/// Adds "change to `directory`" to `actions` (posix_spawn_file_actions_addchdir_np: glibc
/// 2.29, macOS 10.15). Returns 0, or an errno value.
int cspawn_add_chdir(posix_spawn_file_actions_t *actions, const char *directory);

#endif
