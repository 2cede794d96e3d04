#ifndef SWITCHBOARD_URING_H
#define SWITCHBOARD_URING_H
// A minimal io_uring ring on the raw system calls (no liburing): set-up, submission and
// completion queues, one provided-buffer ring. Used by the io_uring event-loop backend; every
// function is for the ring's own thread only.
#ifdef __linux__
#include <linux/io_uring.h>
#include <stdint.h>
#include <string.h>

// Newer than some distributions' kernel headers (Linux 6.12): provided buffers consumed
// incrementally, a completion flag saying the buffer has room left.
#ifndef IOU_PBUF_RING_INC
#define IOU_PBUF_RING_INC 2
#endif
#ifndef IORING_CQE_F_BUF_MORE
#define IORING_CQE_F_BUF_MORE (1U << 4)
#endif

struct switchboard_uring {
    int fd;
    unsigned features;
    // Submission queue.
    unsigned *sq_head;
    unsigned *sq_tail;
    unsigned sq_mask;
    unsigned sq_entries;
    unsigned sqe_tail;      // next free entry (ours; published to *sq_tail at submit)
    struct io_uring_sqe *sqes;
    // Completion queue.
    unsigned *cq_head;
    unsigned *cq_tail;
    unsigned cq_mask;
    struct io_uring_cqe *cqes;
    // Mappings, for tear-down.
    void *sq_ring;
    size_t sq_ring_size;
    void *cq_ring;
    size_t cq_ring_size;
    size_t sqes_size;
    // The provided-buffer ring (group 0).
    struct io_uring_buf_ring *buf_ring;
    size_t buf_ring_size;
    unsigned buf_count;
    unsigned buf_size;
    unsigned short buf_tail;
    unsigned char *buf_base;
    /// Whether the kernel fills buffers incrementally (each receive takes only what it needs
    /// from the head buffer; IORING_CQE_F_BUF_MORE while the buffer has room left).
    int buf_incremental;
    /// The set-up flags the kernel accepted (IORING_SETUP_*).
    unsigned setup_flags;
};

/// Sets up a ring with `entries` submission and `cq_entries` completion slots, single issuer
/// with deferred task running when the kernel has them (the ring must then be used only by
/// the calling thread). 0, or -errno.
int switchboard_uring_init(struct switchboard_uring *r, unsigned entries, unsigned cq_entries);
/// Registers `count` buffers of `size` bytes as provided-buffer group 0, consumed
/// incrementally if `incremental` (the registration fails with -EINVAL where the kernel
/// cannot). 0, or -errno.
int switchboard_uring_setup_buffers(struct switchboard_uring *r, unsigned count, unsigned size, int incremental);
/// Whether the kernel writes received bytes into the buffers only inside
/// `switchboard_uring_enter` (deferred task running): then, with no completion left to reap,
/// nothing in them is still to be read, and their pages can be handed back.
int switchboard_uring_can_trim_buffers(const struct switchboard_uring *r);
/// Hands the buffers' pages back to the system (they read as zeros when next touched).
/// Call only where `switchboard_uring_can_trim_buffers` and with every completion reaped.
/// 0, or -errno.
int switchboard_uring_trim_buffers(struct switchboard_uring *r);
/// How many bytes of the buffers are resident now (whole pages).
size_t switchboard_uring_buffer_resident_bytes(const struct switchboard_uring *r);
/// Unmaps and closes everything.
void switchboard_uring_exit(struct switchboard_uring *r);
/// Submits what is queued and, if `wait`, waits for one completion at most `timeout_ns`
/// (negative: no limit). Returns the number submitted, or -errno (-ETIME, -EINTR are benign).
int switchboard_uring_enter(struct switchboard_uring *r, int wait, int64_t timeout_ns);

/// A zeroed submission entry, or NULL when the queue is full (submit, then ask again).
static inline struct io_uring_sqe *switchboard_uring_sqe(struct switchboard_uring *r) {
    unsigned head = __atomic_load_n(r->sq_head, __ATOMIC_ACQUIRE);
    if (r->sqe_tail - head >= r->sq_entries) return 0;
    struct io_uring_sqe *sqe = &r->sqes[r->sqe_tail & r->sq_mask];
    r->sqe_tail++;
    memset(sqe, 0, sizeof(*sqe));
    return sqe;
}

/// Whether the entry numbered `entry` (the queue's tail when it was taken) is still waiting
/// to be submitted: at or after the kernel's head, before our tail. An entry so old that the
/// counters wrapped since may read as unsubmitted: that costs one needless submit, nothing else.
static inline int switchboard_uring_is_unsubmitted(const struct switchboard_uring *r, unsigned entry) {
    unsigned head = __atomic_load_n(r->sq_head, __ATOMIC_ACQUIRE);
    return entry - head < r->sqe_tail - head;
}

/// The next completion, or NULL; `switchboard_uring_cqe_seen` releases it.
static inline struct io_uring_cqe *switchboard_uring_peek(struct switchboard_uring *r) {
    unsigned head = *r->cq_head;
    unsigned tail = __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE);
    if (head == tail) return 0;
    return &r->cqes[head & r->cq_mask];
}

static inline void switchboard_uring_cqe_seen(struct switchboard_uring *r) {
    __atomic_store_n(r->cq_head, *r->cq_head + 1, __ATOMIC_RELEASE);
}

static inline void switchboard_uring_prep_poll(struct io_uring_sqe *sqe, int fd, uint32_t mask, uint64_t user_data, int multishot) {
    sqe->opcode = IORING_OP_POLL_ADD;
    sqe->fd = fd;
    sqe->poll32_events = mask;
    sqe->len = multishot ? IORING_POLL_ADD_MULTI : 0;
    sqe->user_data = user_data;
}

/// Multishot receive into buffers of group 0.
static inline void switchboard_uring_prep_recv_multishot(struct io_uring_sqe *sqe, int fd, uint64_t user_data) {
    sqe->opcode = IORING_OP_RECV;
    sqe->fd = fd;
    sqe->ioprio = IORING_RECV_MULTISHOT;
    sqe->flags = IOSQE_BUFFER_SELECT;
    sqe->buf_group = 0;
    sqe->user_data = user_data;
}

/// Cancels every request whose user data is `target`.
static inline void switchboard_uring_prep_cancel(struct io_uring_sqe *sqe, uint64_t target, uint64_t user_data) {
    sqe->opcode = IORING_OP_ASYNC_CANCEL;
    sqe->fd = -1;
    sqe->addr = target;
    sqe->cancel_flags = IORING_ASYNC_CANCEL_ALL;
    sqe->user_data = user_data;
}

/// Where buffer `bid` starts.
static inline unsigned char *switchboard_uring_buffer(const struct switchboard_uring *r, unsigned bid) {
    return r->buf_base + (size_t)bid * r->buf_size;
}

/// Hands buffer `bid` back to the kernel.
static inline void switchboard_uring_buffer_return(struct switchboard_uring *r, unsigned bid) {
    unsigned mask = r->buf_count - 1;
    struct io_uring_buf *b = &r->buf_ring->bufs[r->buf_tail & mask];
    b->addr = (uint64_t)(uintptr_t)switchboard_uring_buffer(r, bid);
    b->len = r->buf_size;
    b->bid = (unsigned short)bid;
    r->buf_tail++;
    __atomic_store_n(&r->buf_ring->tail, r->buf_tail, __ATOMIC_RELEASE);
}

static inline uint32_t switchboard_uring_cqe_f_more(void) { return IORING_CQE_F_MORE; }
static inline uint32_t switchboard_uring_cqe_f_buffer(void) { return IORING_CQE_F_BUFFER; }
static inline uint32_t switchboard_uring_cqe_buffer_shift(void) { return IORING_CQE_BUFFER_SHIFT; }
static inline uint32_t switchboard_uring_cqe_f_buf_more(void) { return IORING_CQE_F_BUF_MORE; }
#endif
#endif
