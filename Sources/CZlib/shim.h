#ifndef SWITCHBOARD_CZLIB_SHIM_H
#define SWITCHBOARD_CZLIB_SHIM_H
#include <zlib.h>

// deflateInit2 and inflateInit2 are macros (they pass the library version and the z_stream
// size), which Swift cannot call: these wrappers can be.
static inline int switchboard_deflate_init(z_streamp stream, int level, int window_bits, int mem_level) {
    return deflateInit2(stream, level, Z_DEFLATED, window_bits, mem_level, Z_DEFAULT_STRATEGY);
}

static inline int switchboard_inflate_init(z_streamp stream, int window_bits) {
    return inflateInit2(stream, window_bits);
}
#endif
