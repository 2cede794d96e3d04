#ifndef SWITCHBOARD_SHIMS_H
#define SWITCHBOARD_SHIMS_H
// C helpers for things Swift cannot import directly (function-like macros).
int switchboard_shims_version(void);
// TLS (OpenSSL macro wrappers).
#include "CSwitchboardTLSShims.h"
#endif
