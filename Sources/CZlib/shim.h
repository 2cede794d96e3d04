#ifndef SWITCHBOARD_CZLIB_SHIM_H
#define SWITCHBOARD_CZLIB_SHIM_H
#include <stddef.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <zlib.h>

// zlib's buffers (a compressor's window, hash chains and pending output: 64 KiB each at 15 bits
// and memory level 8; a decompressor's window) come from their own mappings, so that releasing
// an idle connection's stream gives the memory back to the system at once; small allocations
// use malloc. A 16-byte header in front of every block records how it was made.
#define SWITCHBOARD_ZLIB_MAP_THRESHOLD (16 * 1024)

typedef struct {
    size_t size;     // bytes mapped (header included), or 0 for a malloc'ed block
    size_t reserved; // keeps the block 16-byte aligned
} switchboard_zlib_block;

static inline voidpf switchboard_zalloc(voidpf opaque, uInt items, uInt size) {
    (void)opaque;
    size_t bytes = (size_t)items * (size_t)size + sizeof(switchboard_zlib_block);
    switchboard_zlib_block *block;
    if (bytes >= SWITCHBOARD_ZLIB_MAP_THRESHOLD) {
        void *mapped = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mapped == MAP_FAILED) return Z_NULL;
        block = (switchboard_zlib_block *)mapped;
        block->size = bytes;
    } else {
        block = (switchboard_zlib_block *)malloc(bytes);
        if (block == NULL) return Z_NULL;
        block->size = 0;
    }
    return (voidpf)(block + 1);
}

static inline void switchboard_zfree(voidpf opaque, voidpf address) {
    (void)opaque;
    if (address == Z_NULL) return;
    switchboard_zlib_block *block = (switchboard_zlib_block *)address - 1;
    if (block->size != 0) {
        munmap(block, block->size);
    } else {
        free(block);
    }
}

// deflateInit2 and inflateInit2 are macros (they pass the library version and the z_stream
// size), which Swift cannot call: these wrappers can, and install the allocator above.
static inline int switchboard_deflate_init(z_streamp stream, int level, int window_bits, int mem_level) {
    stream->zalloc = switchboard_zalloc;
    stream->zfree = switchboard_zfree;
    stream->opaque = Z_NULL;
    return deflateInit2(stream, level, Z_DEFLATED, window_bits, mem_level, Z_DEFAULT_STRATEGY);
}

static inline int switchboard_inflate_init(z_streamp stream, int window_bits) {
    stream->zalloc = switchboard_zalloc;
    stream->zfree = switchboard_zfree;
    stream->opaque = Z_NULL;
    return inflateInit2(stream, window_bits);
}
#endif
