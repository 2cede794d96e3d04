#define _GNU_SOURCE
#include "CSwitchboardURing.h"
#ifdef __linux__
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static int uring_setup(unsigned entries, struct io_uring_params *p) {
    return (int)syscall(__NR_io_uring_setup, entries, p);
}

static int uring_register(int fd, unsigned op, void *arg, unsigned n) {
    return (int)syscall(__NR_io_uring_register, fd, op, arg, n);
}

int switchboard_uring_init(struct switchboard_uring *r, unsigned entries, unsigned cq_entries) {
    memset(r, 0, sizeof(*r));
    r->fd = -1;
    struct io_uring_params p;
    unsigned const flag_sets[3] = {
        IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
        IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN,
        IORING_SETUP_CQSIZE,
    };
    int fd = -1;
    for (int i = 0; i < 3; i++) {
        memset(&p, 0, sizeof(p));
        p.flags = flag_sets[i];
        p.cq_entries = cq_entries;
        fd = uring_setup(entries, &p);
        if (fd >= 0 || errno != EINVAL) break;
    }
    if (fd < 0) return -errno;
    // Completions with a wait limit (EXT_ARG) and no dropped completions are required.
    if (!(p.features & IORING_FEAT_EXT_ARG) || !(p.features & IORING_FEAT_NODROP)) {
        close(fd);
        return -EOPNOTSUPP;
    }
    r->fd = fd;
    r->features = p.features;
    r->setup_flags = p.flags;
    r->sq_ring_size = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    r->cq_ring_size = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    if (p.features & IORING_FEAT_SINGLE_MMAP) {
        if (r->cq_ring_size > r->sq_ring_size) r->sq_ring_size = r->cq_ring_size;
        r->cq_ring_size = r->sq_ring_size;
    }
    r->sq_ring = mmap(0, r->sq_ring_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQ_RING);
    if (r->sq_ring == MAP_FAILED) { int e = errno; r->sq_ring = 0; switchboard_uring_exit(r); return -e; }
    if (p.features & IORING_FEAT_SINGLE_MMAP) {
        r->cq_ring = r->sq_ring;
    } else {
        r->cq_ring = mmap(0, r->cq_ring_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_CQ_RING);
        if (r->cq_ring == MAP_FAILED) { int e = errno; r->cq_ring = 0; switchboard_uring_exit(r); return -e; }
    }
    r->sqes_size = p.sq_entries * sizeof(struct io_uring_sqe);
    r->sqes = mmap(0, r->sqes_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQES);
    if (r->sqes == MAP_FAILED) { int e = errno; r->sqes = 0; switchboard_uring_exit(r); return -e; }
    unsigned char *sq = r->sq_ring, *cq = r->cq_ring;
    r->sq_head = (unsigned *)(sq + p.sq_off.head);
    r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    r->sq_mask = *(unsigned *)(sq + p.sq_off.ring_mask);
    r->sq_entries = *(unsigned *)(sq + p.sq_off.ring_entries);
    unsigned *array = (unsigned *)(sq + p.sq_off.array);
    for (unsigned i = 0; i < r->sq_entries; i++) array[i] = i;
    r->sqe_tail = *r->sq_tail;
    r->cq_head = (unsigned *)(cq + p.cq_off.head);
    r->cq_tail = (unsigned *)(cq + p.cq_off.tail);
    r->cq_mask = *(unsigned *)(cq + p.cq_off.ring_mask);
    r->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    return 0;
}

int switchboard_uring_setup_buffers(struct switchboard_uring *r, unsigned count, unsigned size, int incremental) {
    if (count == 0 || (count & (count - 1)) != 0 || count > 32768) return -EINVAL;
    r->buf_ring_size = count * sizeof(struct io_uring_buf);
    void *ring = mmap(0, r->buf_ring_size, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    if (ring == MAP_FAILED) return -errno;
    // Buffers are touched only when the kernel fills them: untouched ones cost no memory.
    void *base = mmap(0, (size_t)count * size, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    if (base == MAP_FAILED) { int e = errno; munmap(ring, r->buf_ring_size); return -e; }
    struct io_uring_buf_reg reg;
    memset(&reg, 0, sizeof(reg));
    reg.ring_addr = (uint64_t)(uintptr_t)ring;
    reg.ring_entries = count;
    reg.bgid = 0;
    // The 16 bits after bgid: `flags` in new kernel headers, `pad` in older ones.
    uint16_t reg_flags = incremental ? IOU_PBUF_RING_INC : 0;
    memcpy((char *)&reg + offsetof(struct io_uring_buf_reg, bgid) + sizeof(reg.bgid), &reg_flags, sizeof(reg_flags));
    if (uring_register(r->fd, IORING_REGISTER_PBUF_RING, &reg, 1) < 0) {
        int e = errno;
        munmap(ring, r->buf_ring_size);
        munmap(base, (size_t)count * size);
        return -e;
    }
    r->buf_ring = ring;
    r->buf_base = base;
    r->buf_count = count;
    r->buf_size = size;
    r->buf_tail = 0;
    r->buf_incremental = incremental;
    for (unsigned i = 0; i < count; i++) switchboard_uring_buffer_return(r, i);
    return 0;
}

int switchboard_uring_can_trim_buffers(const struct switchboard_uring *r) {
    return r->buf_base != 0 && (r->setup_flags & IORING_SETUP_DEFER_TASKRUN) != 0;
}

int switchboard_uring_trim_buffers(struct switchboard_uring *r) {
    if (!switchboard_uring_can_trim_buffers(r)) return -EOPNOTSUPP;
    return madvise(r->buf_base, (size_t)r->buf_count * r->buf_size, MADV_DONTNEED) == 0 ? 0 : -errno;
}

size_t switchboard_uring_buffer_resident_bytes(const struct switchboard_uring *r) {
    if (!r->buf_base) return 0;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) return 0;
    size_t length = (size_t)r->buf_count * r->buf_size;
    size_t pages = (length + (size_t)page - 1) / (size_t)page;
    unsigned char *vec = malloc(pages);
    if (!vec) return 0;
    size_t resident = 0;
    if (mincore(r->buf_base, length, vec) == 0) {
        for (size_t i = 0; i < pages; i++) if (vec[i] & 1) resident += (size_t)page;
    }
    free(vec);
    return resident;
}

void switchboard_uring_exit(struct switchboard_uring *r) {
    if (r->buf_base) munmap(r->buf_base, (size_t)r->buf_count * r->buf_size);
    if (r->buf_ring) munmap(r->buf_ring, r->buf_ring_size);
    if (r->sqes) munmap(r->sqes, r->sqes_size);
    if (r->cq_ring && r->cq_ring != r->sq_ring) munmap(r->cq_ring, r->cq_ring_size);
    if (r->sq_ring) munmap(r->sq_ring, r->sq_ring_size);
    if (r->fd >= 0) close(r->fd);
    memset(r, 0, sizeof(*r));
    r->fd = -1;
}

int switchboard_uring_enter(struct switchboard_uring *r, int wait, int64_t timeout_ns) {
    // Without a polling kernel thread, the kernel consumes entries only inside this call: its
    // head is where our unsubmitted entries start.
    unsigned to_submit = r->sqe_tail - __atomic_load_n(r->sq_head, __ATOMIC_ACQUIRE);
    if (to_submit) __atomic_store_n(r->sq_tail, r->sqe_tail, __ATOMIC_RELEASE);
    unsigned flags = IORING_ENTER_GETEVENTS;
    struct __kernel_timespec ts;
    struct io_uring_getevents_arg arg;
    memset(&arg, 0, sizeof(arg));
    void *argp = 0;
    size_t argsz = 0;
    if (wait && timeout_ns >= 0) {
        ts.tv_sec = timeout_ns / 1000000000;
        ts.tv_nsec = timeout_ns % 1000000000;
        arg.ts = (uint64_t)(uintptr_t)&ts;
        flags |= IORING_ENTER_EXT_ARG;
        argp = &arg;
        argsz = sizeof(arg);
    }
    int ret = (int)syscall(__NR_io_uring_enter, r->fd, to_submit, wait ? 1u : 0u, flags, argp, argsz);
    return ret < 0 ? -errno : ret;
}
#endif
