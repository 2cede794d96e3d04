// loadgen: a WebSocket load generator over raw epoll (one thread), for Switchboard's benchmarks.
//
// Modes
//   echo    N connections; each sends one masked frame, waits for the whole echo, repeats.
//           Prints round trips per second and echoed payload MB/s over the measured window.
//   fanout  1 publisher and N subscribers on the same path (a server that relays every message
//           to the path's other connections). The publisher keeps at most --window messages
//           ahead of the slowest subscriber. Prints deliveries per second, and the latency from
//           publish to delivery (p50, p99, max in microseconds): each published payload starts
//           with a stamp of 16 hex digits, the message's sequence number (6) and the time it was
//           sent (10, microseconds since loadgen started); a subscriber reads it on arrival (the
//           time of the read() that completed the message). Flow control follows the highest
//           sequence number each subscriber saw, so a lost message does not stall the run; gaps
//           in the measured window are counted (lost=N). Before measuring, the publisher sends a
//           probe every 20 ms until every subscriber received one (a server relaying through a
//           backplane may take a moment to subscribe). --port2 P puts every other subscriber on
//           port P (a second server sharing the topic through Redis); the publisher stays on
//           --port. Needs --size 16 or more, fill payload.
//   hold    opens N connections, upgrades them, leaves them idle, then reads the server's
//           VmRSS from /proc/PID/status and prints KiB per connection.
//   churn   N connections at a time, each in a loop: connect (from a source address spread over
//           127.0.0.0/8, so that ports in TIME_WAIT never run out across rounds), TLS with --tls,
//           upgrade, one echo, the close handshake (our masked close 1000, the server's close,
//           then the server's end of the TCP connection), and again. Prints cycles per second
//           and, with --pid, the server's CPU-seconds per 1,000 cycles over the measured window
//           (utime + stime from /proc/PID/stat): the figure to compare servers by, since the
//           generator may be what limits the cycles per second. --idle N first opens N more
//           connections that upgrade and then stay idle for the whole run (answering pings), and
//           the churn starts once all are open: connection churn beside a server's long-lived
//           connections (their keepalive timers, the loop's tables at that size). With --pid it
//           also prints the server's resident memory at the end (server_rss_kib).
//
// Every mode prints one machine-readable line starting with "result ", plus loadgen's own CPU
// use over the window: under 100% means the load generator was waiting for the server, i.e.
// the server, not the generator, was the bottleneck.
//
// --tls speaks wss (certificate not verified: the benchmark uses a throwaway self-signed one).
//
// Payloads (--payload): "fill" (default) repeats a-z; "json" sends JSON-like text messages of
// exactly --size bytes (chat and telemetry events: repeated keys, varying numbers and words),
// from a deterministic pool of 64 different messages that each connection cycles through.
//
// permessage-deflate (RFC 7692), echo and hold modes (--deflate, default off):
//   shared    offers "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
//   takeover  offers "permessage-deflate; client_max_window_bits"
// A connection whose server answers without the extension runs uncompressed ("declined").
// Where it was negotiated, every message is compressed: zlib raw deflate, level 6 (zlib's
// default, the servers' too), memLevel 8, window 2^15 or the client_max_window_bits the server
// answered, Z_SYNC_FLUSH with the trailing 00 00 ff ff removed, RSV1 set. The compressor is reset
// per message when we offered (shared) or the server answered client_no_context_takeover;
// those frames are the same for every connection, so they are compressed once, up front.
// Otherwise each connection compresses live with its own stream (context takeover). Frames with
// RSV1 are inflated (00 00 ff ff appended; the stream reset per message when the server answered
// server_no_context_takeover). With --payload json or --deflate, every echo is compared with what
// was sent (mismatches=N; any mismatch fails the run). Hold mode with --deflate or --payload json
// sends ONE message per connection and reads its echo before going idle, so that per-connection
// zlib streams a server allocates on the first compressed message exist when RSS is read.
// The result line counts bytes in the measured window: payload_* = message bytes (uncompressed),
// wire_* = frame bytes (headers, mask keys and payload as sent, i.e. after compression; the HTTP
// upgrade excluded), and saved_pct = 100 * (1 - (wire_sent + wire_recv) / (payload_sent +
// payload_recv)).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

enum mode { MODE_ECHO, MODE_FANOUT, MODE_HOLD, MODE_CHURN };
enum state { ST_CONNECTING, ST_TLS, ST_UPGRADING, ST_OPEN, ST_DEAD };

typedef struct conn {
    int fd;
    int index;
    enum state state;
    SSL *ssl;
    int publisher;           // fanout: the one connection that sends
    // Outgoing: one frame (or the upgrade request) at a time, plus an optional pong.
    const uint8_t *out;
    size_t out_len, out_off;
    uint8_t pong[2 + 4 + 125];
    size_t pong_len;
    int want_write;          // EPOLLOUT registered
    // Upgrade response.
    char hs[1024];
    size_t hs_len;
    // Incoming frame parser.
    uint8_t hdr[14];
    int hdr_len, hdr_need;
    uint64_t payload_left;
    int opcode, fin;
    uint8_t ctrl[125];
    int ctrl_len;
    int awaiting;            // echo: a round trip is in flight; hold: the one message's echo
    uint64_t received;       // messages fully received
    uint64_t last_seq;       // fanout: highest sequence number received
    uint8_t stamp[16];       // fanout: the first bytes of the message being received
    int stamp_len;
    // Pool messages (--payload json) and permessage-deflate; unused on the plain fast path.
    int msgs;                // sends pool messages (json, or deflate negotiated)
    int verify;              // compares every echo with what was sent
    int dfl;                 // permessage-deflate negotiated
    int reset_out, reset_in; // no context takeover: our compressor / the server's
    int out_wbits;           // our window: 15 or the client_max_window_bits answered
    int next_msg, msg_idx;   // next pool message to send; the one whose echo is awaited
    z_stream *zout, *zin;    // per-connection streams (context takeover), allocated lazily
    uint8_t *obuf;           // live-compressed frame
    size_t obuf_cap;
    uint8_t *ibuf;           // compressed message being received
    size_t ibuf_len, ibuf_cap;
    int msg_rsv1;            // the message being received is compressed
    int cmp_bad;             // uncompressed echo: differs from what was sent
    uint64_t cmp_off;        // uncompressed echo: bytes compared so far
    uint64_t msg_wire, msg_plen;  // frame bytes and frame payload bytes of the message so far
    int idle;                // churn --idle: upgrades, then stays open and idle
    int closing;             // churn: our close frame is queued or sent
    int got_close;           // churn: the server's close frame arrived; its end of TCP comes next
} conn;

static struct {
    const char *host;
    int port;
    const char *path;
    enum mode mode;
    int conns;
    size_t size;
    int binary;
    double duration, warmup;
    int tls;
    int pid;
    int window;
    int max_connecting;
    double settle;
    int json;
    int deflate;             // DEFLATE_OFF, DEFLATE_SHARED, DEFLATE_TAKEOVER
    int level;
    int port2;               // fanout: every other subscriber connects here (0: none)
    int idle;                // churn: idle connections held beside the churning ones
} opt = {"127.0.0.1", 9001, "/", MODE_ECHO, 100, 16, 0, 5, 1, 0, 0, 8, 200, 3, 0, 0, 6, 0, 0};

enum { DEFLATE_OFF, DEFLATE_SHARED, DEFLATE_TAKEOVER };

static int ep;
static conn *conns;
static SSL_CTX *ssl_ctx;
static uint8_t *frame;       // the masked data frame every connection sends
static size_t frame_len;
static char request[512];
static size_t request_len;
static int measuring, done;
static uint64_t measured_msgs, errors, opened, failed;
static uint64_t published;   // fanout: messages the publisher has sent (= the last sequence number)
static uint64_t lost;        // fanout: sequence numbers a subscriber skipped, in the measured window
static double t_base;        // loadgen's start: stamps count microseconds from here
static uint64_t t_read_us;   // when the last read() returned, in microseconds since t_base
static int primed;           // fanout: every subscriber received a message
#define LAT_MAX_US 2000000   // latency histogram: 1 us buckets up to 2 s (later ones land in the last)
static uint32_t lat_hist[LAT_MAX_US + 1];
static uint64_t lat_count, lat_max;
static uint64_t wire_sent, wire_recv, payload_sent, payload_recv;  // in the measured window
static uint64_t negotiated, declined, mismatches;
static int hold_pending;     // hold: connections awaiting their one message's echo
static const uint8_t mask_key[4] = {0x37, 0xfa, 0x21, 0x3d};
// churn: our close frame (1000, masked), cycles completed in the window, source addresses used.
static const uint8_t close_frame[8] = {0x88, 0x82, 0x37, 0xfa, 0x21, 0x3d, 0x03 ^ 0x37, 0xe8 ^ 0xfa};
static uint64_t measured_cycles, sources_used;
static int idle_opened;           // churn --idle: idle connections upgraded

// The message pool: payload, and its masked uncompressed frame.
#define POOL_MAX 64
typedef struct { uint8_t *data; size_t len; } bytes;
static int npool;
static bytes pool_payload[POOL_MAX], pool_frame[POOL_MAX];
static bytes *pool_zframe[16];    // compressed frames from a fresh compressor, per window bits
static z_stream zshared_out, zshared_in;  // for those frames; inflate without context takeover
static int zshared_out_bits;
static uint8_t *scratch;          // inflated message
static size_t scratch_cap;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static void die(const char *msg) {
    fprintf(stderr, "loadgen: %s\n", msg);
    exit(2);
}

static long rss_kib(int pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) { kib = strtol(line + 6, NULL, 10); break; }
    fclose(f);
    return kib;
}

// utime + stime of `pid` in seconds (/proc/PID/stat fields 14 and 15), or -1.
static double process_cpu_seconds(int pid) {
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = 0;
    const char *p = strrchr(line, ')');  // the command name may hold spaces
    if (!p) return -1;
    unsigned long long ut = 0, st = 0;
    // After ")": state (3), then fields 4..13, utime (14), stime (15).
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static void build_frame(void) {
    const uint8_t *key = mask_key;
    size_t n = opt.size, h = 2;
    if (n >= 65536) h += 8; else if (n >= 126) h += 2;
    frame_len = h + 4 + n;
    frame = malloc(frame_len);
    if (!frame) die("out of memory");
    frame[0] = 0x80 | (opt.binary ? 0x2 : 0x1);
    if (n >= 65536) {
        frame[1] = 0x80 | 127;
        for (int i = 0; i < 8; i++) frame[2 + i] = (uint8_t)(n >> (56 - 8 * i));
    } else if (n >= 126) {
        frame[1] = 0x80 | 126;
        frame[2] = (uint8_t)(n >> 8);
        frame[3] = (uint8_t)n;
    } else {
        frame[1] = 0x80 | (uint8_t)n;
    }
    memcpy(frame + h, key, 4);
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)('a' + i % 26);   // ASCII, so valid UTF-8 for text frames
        frame[h + 4 + i] = c ^ key[i % 4];
    }
    const char *ext = opt.deflate == DEFLATE_SHARED
        ? "Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; client_no_context_takeover\r\n"
        : opt.deflate == DEFLATE_TAKEOVER ? "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n" : "";
    request_len = (size_t)snprintf(request, sizeof request,
        "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n%s\r\n",
        opt.path, opt.host, opt.port, ext);
}

// ---- the message pool (--payload json, --deflate) ----

static uint64_t rng_state;
static uint64_t rnd(void) {  // splitmix64: deterministic across runs
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static const char *words[] = {
    "the", "deploy", "finished", "on", "staging", "and", "tests", "are", "green", "can", "you", "check",
    "latency", "graph", "after", "lunch", "I", "think", "cache", "warmed", "up", "thanks", "will",
    "merge", "today", "meeting", "moved", "to", "three", "ok", "sounds", "good", "see", "dashboard",
    "alert", "resolved", "battery", "low", "restart", "sensor", "window", "kitchen", "update", "ready"};
static const char *users[] = {"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi",
                              "ivan", "judy", "mallory", "oscar", "peggy", "trent", "victor", "wendy"};
static const char *rooms[] = {"general", "random", "ops", "dev", "support", "sales", "iot", "alerts"};
#define W(a) (a)[rnd() % (sizeof(a) / sizeof *(a))]

static size_t add_words(char *b, size_t n, size_t cap, int count) {
    for (int i = 0; i < count && n < cap; i++) n += (size_t)snprintf(b + n, cap - n, "%s%s", i ? " " : "", W(words));
    return n < cap ? n : cap;
}

// One JSON object of exactly `size` bytes: {"seq":..,"room":..,"events":[...],"note":"..."}.
static void json_message(char *out, size_t size, int index) {
    char buf[8192], ev[1024];
    rng_state = 0x5eed0000ULL + (uint64_t)index * 7919;
    size_t n = (size_t)snprintf(buf, sizeof buf, "{\"seq\":%d,\"room\":\"%s\",\"events\":[", 100000 + index * 37, W(rooms));
    const char *tail1 = "],\"note\":\"", *tail2 = "\"}";
    size_t tails = strlen(tail1) + strlen(tail2);
    for (int e = 0;; e++) {
        size_t m;
        long long ts = 1700000000000LL + (long long)index * 1000 + e * 37 + (long long)(rnd() % 997);
        if (rnd() % 3) {
            m = (size_t)snprintf(ev, sizeof ev, "%s{\"type\":\"chat\",\"user\":\"%s%d\",\"ts\":%lld,\"text\":\"",
                                 e ? "," : "", W(users), (int)(rnd() % 100), ts);
            m = add_words(ev, m, sizeof ev - 64, 3 + (int)(rnd() % 8));
            m += (size_t)snprintf(ev + m, sizeof ev - m, "\",\"reactions\":%d,\"edited\":%s}",
                                  (int)(rnd() % 12), rnd() % 4 ? "false" : "true");
        } else {
            m = (size_t)snprintf(ev, sizeof ev,
                "%s{\"type\":\"telemetry\",\"device\":\"sensor-%03d\",\"ts\":%lld,\"temp\":%.2f,"
                "\"humidity\":%.1f,\"battery\":%d,\"status\":\"%s\"}",
                e ? "," : "", (int)(rnd() % 200), ts, 15 + (double)(rnd() % 1500) / 100, 30 + (double)(rnd() % 500) / 10,
                (int)(rnd() % 101), rnd() % 5 ? "ok" : "degraded");
        }
        if (n + m + tails + 8 > size) break;
        memcpy(buf + n, ev, m);
        n += m;
    }
    n += (size_t)snprintf(buf + n, sizeof buf - n, "%s", tail1);
    size_t want = size - strlen(tail2);   // the note fills up to here
    while (n < want) {
        char w[64];
        int k = snprintf(w, sizeof w, "%s%s", buf[n - 1] == '"' ? "" : " ", W(words));
        size_t take = (size_t)k < want - n ? (size_t)k : want - n;
        memcpy(buf + n, w, take);
        n += take;
    }
    if (buf[n - 1] == ' ') buf[n - 1] = '.';
    memcpy(buf + n, tail2, strlen(tail2));
    n += strlen(tail2);
    if (n != size) die("json_message: size mismatch");
    memcpy(out, buf, size);
}

static void mask(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] ^= mask_key[i & 3];
}

// Header (FIN, opcode, RSV1 when compressed, mask bit, length, key) ending at `end`; returns
// where it starts.
static uint8_t *put_header(uint8_t *end, size_t n, int rsv1) {
    size_t h = 2 + 4 + (n >= 65536 ? 8 : n >= 126 ? 2 : 0);
    uint8_t *f = end - h;
    f[0] = (uint8_t)(0x80 | (rsv1 ? 0x40 : 0) | (opt.binary ? 0x2 : 0x1));
    if (n >= 65536) {
        f[1] = 0x80 | 127;
        for (int i = 0; i < 8; i++) f[2 + i] = (uint8_t)(n >> (56 - 8 * i));
    } else if (n >= 126) {
        f[1] = 0x80 | 126; f[2] = (uint8_t)(n >> 8); f[3] = (uint8_t)n;
    } else {
        f[1] = (uint8_t)(0x80 | n);
    }
    memcpy(end - 4, mask_key, 4);
    return f;
}

static void build_pool(void) {
    npool = opt.json ? POOL_MAX : 1;
    for (int i = 0; i < npool; i++) {
        uint8_t *d = malloc(opt.size + 1);
        if (!d) die("out of memory");
        if (opt.json) json_message((char *)d, opt.size, i);
        else for (size_t k = 0; k < opt.size; k++) d[k] = (uint8_t)('a' + k % 26);
        pool_payload[i] = (bytes){d, opt.size};
        uint8_t *f = malloc(14 + opt.size);
        if (!f) die("out of memory");
        memcpy(f + 14, d, opt.size);
        mask(f + 14, opt.size);
        uint8_t *start = put_header(f + 14, opt.size, 0);
        pool_frame[i] = (bytes){start, (size_t)(f + 14 - start) + opt.size};
    }
    scratch_cap = opt.size + 1;  // one more byte: a longer echo shows as a full buffer
    scratch = malloc(scratch_cap);
    if (!scratch) die("out of memory");
    if (inflateInit2(&zshared_in, -15) != Z_OK) die("inflateInit2");
}

// Compresses one message with `z` (Z_SYNC_FLUSH, trailing 00 00 ff ff removed) into a masked
// frame with RSV1 in *buf (grown as needed); returns the frame.
static bytes deflate_frame(z_stream *z, const bytes *msg, uint8_t **buf, size_t *cap) {
    size_t need = 14 + deflateBound(z, msg->len) + 64;
    if (*cap < need) { free(*buf); *buf = malloc(need); *cap = need; if (!*buf) die("out of memory"); }
    z->next_in = msg->data;
    z->avail_in = (uInt)msg->len;
    z->next_out = *buf + 14;
    z->avail_out = (uInt)(*cap - 14);
    int r = deflate(z, Z_SYNC_FLUSH);
    if (r != Z_OK || z->avail_in != 0 || z->avail_out == 0) die("deflate failed");
    size_t clen = (size_t)(*cap - 14 - z->avail_out);
    uint8_t *p = *buf + 14;
    if (clen < 4 || memcmp(p + clen - 4, "\x00\x00\xff\xff", 4) != 0) die("deflate: no sync-flush marker");
    clen -= 4;
    mask(p, clen);
    uint8_t *start = put_header(p, clen, 1);
    return (bytes){start, (size_t)(p - start) + clen};
}

// The frames a fresh compressor with this window produces (no context takeover, or a first
// message): the same for every connection, so compressed once.
static bytes *fresh_zframes(int wbits) {
    if (pool_zframe[wbits]) return pool_zframe[wbits];
    if (zshared_out_bits) deflateEnd(&zshared_out);
    memset(&zshared_out, 0, sizeof zshared_out);
    if (deflateInit2(&zshared_out, opt.level, Z_DEFLATED, -wbits, 8, Z_DEFAULT_STRATEGY) != Z_OK) die("deflateInit2");
    zshared_out_bits = wbits;
    bytes *v = calloc((size_t)npool, sizeof *v);
    if (!v) die("out of memory");
    for (int i = 0; i < npool; i++) {
        uint8_t *buf = NULL;
        size_t cap = 0;
        deflateReset(&zshared_out);
        v[i] = deflate_frame(&zshared_out, &pool_payload[i], &buf, &cap);
    }
    return pool_zframe[wbits] = v;
}

// ---- I/O over plain sockets or TLS: >0 bytes, 0 EOF, -1 would block, -2 error ----

static ssize_t io_read(conn *c, uint8_t *buf, size_t len) {
    if (!c->ssl) {
        ssize_t n = read(c->fd, buf, len);
        if (n >= 0) return n;
        return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? -1 : -2;
    }
    int n = SSL_read(c->ssl, buf, (int)(len > 1 << 30 ? 1 << 30 : len));
    if (n > 0) return n;
    int e = SSL_get_error(c->ssl, n);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return -1;
    return e == SSL_ERROR_ZERO_RETURN ? 0 : -2;
}

static ssize_t io_write(conn *c, const uint8_t *buf, size_t len) {
    if (!c->ssl) {
        ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL);
        if (n >= 0) return n;
        return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? -1 : -2;
    }
    int n = SSL_write(c->ssl, buf, (int)(len > 1 << 30 ? 1 << 30 : len));
    if (n > 0) return n;
    int e = SSL_get_error(c->ssl, n);
    return (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) ? -1 : -2;
}

static void set_events(conn *c, int want_write) {
    if (c->want_write == want_write) return;
    c->want_write = want_write;
    struct epoll_event ev = {.events = EPOLLIN | (want_write ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static int connecting_now;
static int next_to_open;

static void kill_conn(conn *c, const char *why) {
    if (c->state == ST_DEAD) return;
    if (c->state != ST_OPEN) { failed++; connecting_now--; }
    else errors++;
    if (opt.mode == MODE_HOLD && c->awaiting) { c->awaiting = 0; hold_pending--; }
    if (getenv("LOADGEN_VERBOSE")) fprintf(stderr, "loadgen: connection %d: %s\n", c->index, why);
    c->state = ST_DEAD;
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    if (c->ssl) { SSL_free(c->ssl); c->ssl = NULL; }
    close(c->fd);
}

static void open_conn(conn *c) {
    int port = opt.port2 && !c->publisher && c->index % 2 == 1 ? opt.port2 : opt.port;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, opt.host, &sa.sin_addr) != 1) die("--host must be an IPv4 address");
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) die("socket() failed (raise ulimit -n?)");
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (opt.mode == MODE_CHURN && (sa.sin_addr.s_addr & htonl(0xff000000)) == htonl(0x7f000000)) {
        // A new source address of 127.0.0.0/8 for each connection (127.1.0.1 … 127.250.254.254,
        // then around again): each address has its own ephemeral ports.
        uint64_t k = sources_used++;
        uint32_t a = 1 + (uint32_t)(k % 250), b = (uint32_t)(k / 250 % 255), d = 1 + (uint32_t)(k / 63750 % 254);
        struct sockaddr_in src = {.sin_family = AF_INET, .sin_port = 0,
                                  .sin_addr.s_addr = htonl(0x7f000000u | a << 16 | b << 8 | d)};
        if (bind(c->fd, (struct sockaddr *)&src, sizeof src) < 0) die("bind() of a 127.0.0.0/8 source address failed");
    }
    c->state = ST_CONNECTING;
    connecting_now++;
    int r = connect(c->fd, (struct sockaddr *)&sa, sizeof sa);
    if (r < 0 && errno != EINPROGRESS) { c->state = ST_UPGRADING; kill_conn(c, "connect failed"); return; }
    c->want_write = 1;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) die("epoll_ctl");
}

// churn: a cycle ended (the server closed its end after the close handshake): the slot starts
// the next connection at once.
static void cycle_done(conn *c) {
    if (measuring) measured_cycles++;
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    if (c->ssl) { SSL_free(c->ssl); c->ssl = NULL; }
    close(c->fd);
    int index = c->index;
    free(c->obuf); free(c->ibuf);
    if (c->zout) { deflateEnd(c->zout); free(c->zout); }
    if (c->zin) { inflateEnd(c->zin); free(c->zin); }
    memset(c, 0, sizeof *c);
    c->index = index;
    c->fd = -1;
    if (!done) open_conn(c);
}

static void open_more(void) {
    while (next_to_open < opt.conns && connecting_now < opt.max_connecting) open_conn(&conns[next_to_open++]);
}

// Flushes pending output. Returns 0, or -1 when the connection died.
static int flush_out(conn *c) {
    for (;;) {
        const uint8_t *buf;
        size_t left;
        if (c->out) { buf = c->out + c->out_off; left = c->out_len - c->out_off; }
        else if (c->pong_len) { buf = c->pong; left = c->pong_len; }
        else { set_events(c, 0); return 0; }
        ssize_t n = io_write(c, buf, left);
        if (n == -1) { set_events(c, 1); return 0; }
        if (n <= 0) { kill_conn(c, "write failed"); return -1; }
        if (c->out) {
            c->out_off += (size_t)n;
            if (c->out_off == c->out_len) c->out = NULL;
        } else {
            // A pong is tiny; a partial TLS/plain write of it is kept by shifting.
            memmove(c->pong, c->pong + n, c->pong_len - (size_t)n);
            c->pong_len -= (size_t)n;
        }
    }
}

// A pool message: plain, compressed once up front, or compressed live (context takeover).
static void send_message(conn *c) {
    int m = c->next_msg;
    c->next_msg = (m + 1) % npool;
    c->msg_idx = m;
    bytes f;
    if (!c->dfl) f = pool_frame[m];
    else if (c->reset_out || opt.mode == MODE_HOLD) f = fresh_zframes(c->out_wbits)[m];
    else {
        if (!c->zout) {
            c->zout = calloc(1, sizeof *c->zout);
            if (!c->zout || deflateInit2(c->zout, opt.level, Z_DEFLATED, -c->out_wbits, 8, Z_DEFAULT_STRATEGY) != Z_OK)
                die("deflateInit2");
        }
        f = deflate_frame(c->zout, &pool_payload[m], &c->obuf, &c->obuf_cap);
    }
    c->out = f.data;
    c->out_len = f.len;
}

static void send_frame(conn *c) {
    if (c->msgs) send_message(c);
    else { c->out = frame; c->out_len = frame_len; }
    c->out_off = 0;
    if (measuring) { wire_sent += c->out_len; payload_sent += opt.size; }
}

// Inflates the compressed message in c->ibuf into scratch; returns its length, or -1.
static long inflate_message(conn *c) {
    z_stream *z;
    if (c->reset_in || opt.mode == MODE_HOLD) {
        z = &zshared_in;
        inflateReset(z);
    } else {
        if (!c->zin) {
            c->zin = calloc(1, sizeof *c->zin);
            if (!c->zin || inflateInit2(c->zin, -15) != Z_OK) die("inflateInit2");
        }
        z = c->zin;
    }
    memcpy(c->ibuf + c->ibuf_len, "\x00\x00\xff\xff", 4);  // ibuf always has 4 bytes to spare
    z->next_in = c->ibuf;
    z->avail_in = (uInt)(c->ibuf_len + 4);
    z->next_out = scratch;
    z->avail_out = (uInt)scratch_cap;
    while (z->avail_in > 0 && z->avail_out > 0) {
        int r = inflate(z, Z_SYNC_FLUSH);
        if (r != Z_OK && r != Z_BUF_ERROR) return -1;
        if (r == Z_BUF_ERROR) break;
    }
    if (z->avail_in > 0) return (long)scratch_cap;  // more output than room: longer than sent
    return (long)(scratch_cap - z->avail_out);
}

static void data_bytes(conn *c, const uint8_t *p, size_t n) {
    if (c->msg_rsv1) {
        if (c->ibuf_len + n + 4 > c->ibuf_cap) {
            size_t cap = c->ibuf_cap ? c->ibuf_cap : 4096;
            while (cap < c->ibuf_len + n + 4) cap *= 2;
            if (cap > (64u << 20)) { kill_conn(c, "compressed message too long"); return; }
            uint8_t *b = realloc(c->ibuf, cap);
            if (!b) die("out of memory");
            c->ibuf = b;
            c->ibuf_cap = cap;
        }
        memcpy(c->ibuf + c->ibuf_len, p, n);
        c->ibuf_len += n;
    } else {
        const bytes *e = &pool_payload[c->msg_idx];
        if (c->cmp_off + n > e->len || memcmp(e->data + c->cmp_off, p, n) != 0) c->cmp_bad = 1;
        c->cmp_off += n;
    }
}

// Checks a whole echo against the message sent; returns its (decompressed) length.
static uint64_t verify_message(conn *c) {
    const bytes *e = &pool_payload[c->msg_idx];
    int ok;
    uint64_t len;
    if (c->msg_rsv1) {
        long n = inflate_message(c);
        ok = n == (long)e->len && memcmp(scratch, e->data, e->len) == 0;
        len = n < 0 ? 0 : (uint64_t)n;
        c->ibuf_len = 0;
    } else {
        ok = !c->cmp_bad && c->cmp_off == e->len;
        len = c->cmp_off;
    }
    if (!ok) {
        if (mismatches++ < 5)
            fprintf(stderr, "loadgen: MISMATCH on connection %d: echo of message %d (%zu bytes) came back %s with %llu bytes\n",
                    c->index, c->msg_idx, e->len, c->msg_rsv1 ? "compressed" : "uncompressed", (unsigned long long)len);
    }
    return len;
}

static conn *publisher;
// The lowest "highest sequence number received" over the open subscribers.
static uint64_t min_seq(void) {
    uint64_t m = UINT64_MAX;
    for (int i = 0; i < opt.conns; i++)
        if (!conns[i].publisher && conns[i].state == ST_OPEN && conns[i].last_seq < m) m = conns[i].last_seq;
    return m;
}

static int all_open(void) { return opened + failed >= (uint64_t)opt.conns; }

static uint64_t now_us(void) { return (uint64_t)((now() - t_base) * 1e6); }

// Writes the stamp (sequence number, send time) into the shared frame's payload, masked.
static void stamp_frame(uint64_t seq, uint64_t t_us) {
    char text[17];
    snprintf(text, sizeof text, "%06llx%010llx", (unsigned long long)(seq & 0xffffff),
             (unsigned long long)(t_us & 0xffffffffffULL));
    uint8_t *payload = frame + frame_len - opt.size;
    for (int i = 0; i < 16; i++) payload[i] = (uint8_t)text[i] ^ mask_key[i % 4];
}

static void publish_if_window(void) {
    if (!publisher || publisher->state != ST_OPEN || publisher->out || !all_open()) return;
    static uint64_t slowest;
    static double last_probe;
    if (!primed) {
        // Probing: one message every 20 ms until every subscriber has received one.
        if (published > 0 && min_seq() > 0) { primed = 1; slowest = min_seq(); }
        else {
            double t = now();
            if (t - last_probe < 0.02) return;
            last_probe = t;
        }
    }
    if (primed) {
        if (published - slowest >= (uint64_t)opt.window) slowest = min_seq();
        if (published - slowest >= (uint64_t)opt.window) return;
    }
    published++;
    stamp_frame(published, now_us());
    send_frame(publisher);
    flush_out(publisher);
}

static uint64_t hex_value(const uint8_t *p, int n, int *ok) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) {
        int d = p[i] >= '0' && p[i] <= '9' ? p[i] - '0' : p[i] >= 'a' && p[i] <= 'f' ? p[i] - 'a' + 10 : -1;
        if (d < 0) { *ok = 0; return 0; }
        v = v << 4 | (uint64_t)d;
    }
    return v;
}

// A subscriber received a whole message: its sequence number, gaps, latency.
static void fanout_delivered(conn *c) {
    int ok = c->stamp_len == 16;
    uint64_t seq24 = hex_value(c->stamp, 6, &ok), sent = hex_value(c->stamp + 6, 10, &ok);
    if (!ok) { if (errors++ < 5) fprintf(stderr, "loadgen: connection %d: a message without a stamp\n", c->index); return; }
    // The full sequence number: the latest one published with these low 24 bits.
    uint64_t seq = (published & ~0xffffffULL) | seq24;
    if (seq > published) seq -= 0x1000000ULL;
    if (seq <= c->last_seq) return;  // not newer (a duplicate): nothing to learn
    if (measuring) {
        if (c->last_seq > 0) lost += seq - c->last_seq - 1;
        uint64_t t = t_read_us & 0xffffffffffULL;
        uint64_t lat = (t - sent) & 0xffffffffffULL;
        if (lat > lat_max) lat_max = lat;
        lat_hist[lat > LAT_MAX_US ? LAT_MAX_US : lat]++;
        lat_count++;
    }
    c->last_seq = seq;
}

static uint64_t lat_percentile(double q) {
    if (!lat_count) return 0;
    uint64_t want = (uint64_t)(q * (double)lat_count + 0.5), seen = 0;
    if (want < 1) want = 1;
    for (uint64_t v = 0; v <= LAT_MAX_US; v++) {
        seen += lat_hist[v];
        if (seen >= want) return v;
    }
    return LAT_MAX_US;
}

static void message_done(conn *c) {
    c->received++;
    uint64_t plen = c->verify ? verify_message(c) : c->msg_plen;
    if (measuring) { wire_recv += c->msg_wire; payload_recv += plen; }
    if (opt.mode == MODE_HOLD && c->awaiting) {
        c->awaiting = 0;
        hold_pending--;
        free(c->ibuf); c->ibuf = NULL; c->ibuf_len = c->ibuf_cap = 0;
        return;
    }
    if (opt.mode == MODE_ECHO) {
        if (measuring) measured_msgs++;
        c->awaiting = 0;
        if (!done) { send_frame(c); c->awaiting = 1; }
    } else if (opt.mode == MODE_CHURN) {
        c->awaiting = 0;
        c->closing = 1;
        c->out = close_frame;
        c->out_len = sizeof close_frame;
        c->out_off = 0;
    } else if (opt.mode == MODE_FANOUT) {
        if (measuring) measured_msgs++;
        if (!c->publisher) fanout_delivered(c);
    }
}

static void frame_done(conn *c) {
    switch (c->opcode) {
    case 0x8:
        if (opt.mode == MODE_CHURN && c->closing) { c->got_close = 1; return; }  // its end of TCP follows
        kill_conn(c, "server sent close");
        return;
    case 0x9: {  // ping: answer with a masked pong carrying the same payload
        if (c->pong_len + 6 + (size_t)c->ctrl_len > sizeof c->pong) return;  // one pending pong is enough
        uint8_t *p = c->pong + c->pong_len;
        p[0] = 0x8A; p[1] = 0x80 | (uint8_t)c->ctrl_len;
        memset(p + 2, 0, 4);  // zero mask key: payload goes as is
        memcpy(p + 6, c->ctrl, (size_t)c->ctrl_len);
        c->pong_len += 6 + (size_t)c->ctrl_len;
        return;
    }
    case 0xA:
        return;
    default:
        if (c->fin) message_done(c);
    }
}

// Parses incoming frames without copying data payloads.
static void consume(conn *c, const uint8_t *p, size_t n) {
    const uint8_t *end = p + n;
    while (p < end && c->state == ST_OPEN) {
        if (c->hdr_need > c->hdr_len) {
            while (c->hdr_len < c->hdr_need && p < end) {
                c->hdr[c->hdr_len++] = *p++;
                if (c->hdr_len == 2) {
                    if (c->hdr[1] & 0x80) { kill_conn(c, "server frame is masked"); return; }
                    int l7 = c->hdr[1] & 0x7f;
                    c->hdr_need = 2 + (l7 == 126 ? 2 : l7 == 127 ? 8 : 0);
                }
            }
            if (c->hdr_len < c->hdr_need) return;
            int l7 = c->hdr[1] & 0x7f;
            uint64_t len = (uint64_t)l7;
            if (l7 == 126) len = ((uint64_t)c->hdr[2] << 8) | c->hdr[3];
            else if (l7 == 127) { len = 0; for (int i = 0; i < 8; i++) len = (len << 8) | c->hdr[2 + i]; }
            int op = c->hdr[0] & 0x0f;
            int rsv1 = (c->hdr[0] & 0x40) != 0;
            if (rsv1 && (!c->dfl || op == 0 || op >= 0x8)) { kill_conn(c, "unexpected RSV1"); return; }
            if (op >= 0x1 && op <= 0x7) {  // a new data message
                c->msg_rsv1 = rsv1; c->msg_wire = 0; c->msg_plen = 0; c->cmp_off = 0; c->cmp_bad = 0; c->ibuf_len = 0;
                c->stamp_len = 0;
            }
            if (op < 0x8) { c->msg_wire += (uint64_t)c->hdr_need + len; c->msg_plen += len; }
            if (op != 0) c->opcode = op; else if (c->opcode >= 0x8) c->opcode = 0x2;
            if (op >= 0x8 && len > 125) { kill_conn(c, "control frame too long"); return; }
            c->fin = (c->hdr[0] & 0x80) != 0;
            c->payload_left = len;
            c->ctrl_len = 0;
            c->hdr_len = 0;
            if (len == 0) { c->hdr_need = 2; frame_done(c); continue; }
            c->hdr_need = 0;  // now in the payload
            continue;
        }
        size_t take = (size_t)(c->payload_left < (uint64_t)(end - p) ? c->payload_left : (uint64_t)(end - p));
        if (c->opcode >= 0x8) { memcpy(c->ctrl + c->ctrl_len, p, take); c->ctrl_len += (int)take; }
        else if (c->verify) { data_bytes(c, p, take); if (c->state != ST_OPEN) return; }
        else if (opt.mode == MODE_FANOUT && c->stamp_len < 16) {
            size_t k = take < (size_t)(16 - c->stamp_len) ? take : (size_t)(16 - c->stamp_len);
            memcpy(c->stamp + c->stamp_len, p, k);
            c->stamp_len += (int)k;
        }
        p += take;
        c->payload_left -= take;
        if (c->payload_left == 0) { c->hdr_need = 2; c->hdr_len = 0; frame_done(c); }
    }
}

static void became_open(conn *c) {
    c->state = ST_OPEN;
    connecting_now--;
    opened++;
    c->hdr_need = 2;
    c->hdr_len = 0;
    c->msgs = opt.json || c->dfl;
    c->verify = (opt.json || opt.deflate) && opt.mode != MODE_FANOUT;
    c->next_msg = (c->index * 13) % npool;
    if (c->idle) { idle_opened++; return; }
    if ((opt.mode == MODE_ECHO || opt.mode == MODE_CHURN) && !done) { send_frame(c); c->awaiting = 1; }
    if (opt.mode == MODE_HOLD && (opt.json || opt.deflate)) { send_frame(c); c->awaiting = 1; hold_pending++; }
}

// Reads the upgrade response's Sec-WebSocket-Extensions; returns -1 when it is unacceptable.
static int parse_extensions(conn *c, const char *end) {
    const char *line = strstr(c->hs, "\r\n");
    char val[512] = "";
    while (line && line < end) {
        line += 2;
        if (strncasecmp(line, "Sec-WebSocket-Extensions:", 25) == 0) {
            const char *eol = strstr(line, "\r\n");
            size_t l = (size_t)(eol - line - 25), have = strlen(val);
            if (have + l + 2 < sizeof val) { if (have) strcat(val, ","); strncat(val, line + 25, l); }
        }
        line = strstr(line, "\r\n");
    }
    static int shown;
    if (opt.deflate && !shown++) fprintf(stderr, "loadgen: the server answered Sec-WebSocket-Extensions:%s\n", val[0] ? val : " (none)");
    if (!val[0]) { if (opt.deflate) declined++; return 0; }
    if (!opt.deflate || !strcasestr(val, "permessage-deflate")) return -1;  // not offered
    c->dfl = 1;
    negotiated++;
    c->reset_out = opt.deflate == DEFLATE_SHARED || strcasestr(val, "client_no_context_takeover") != NULL;
    c->reset_in = strcasestr(val, "server_no_context_takeover") != NULL;
    c->out_wbits = 15;
    const char *w = strcasestr(val, "client_max_window_bits");
    if (w) {
        w += 22;
        while (*w == ' ' || *w == '=' || *w == '"') w++;
        if (*w >= '0' && *w <= '9') c->out_wbits = atoi(w);
        if (c->out_wbits < 9 || c->out_wbits > 15) return -1;  // 8: zlib's raw deflate cannot
    }
    return 0;
}

static void start_upgrade(conn *c) {
    c->state = ST_UPGRADING;
    c->out = (const uint8_t *)request;
    c->out_len = request_len;
    c->out_off = 0;
}

static uint8_t rbuf[256 * 1024];

static void on_event(conn *c, uint32_t events) {
    if (c->state == ST_DEAD) return;
    if (c->state == ST_CONNECTING) {
        int err = 0;
        socklen_t l = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
        if (err) { kill_conn(c, "connect refused"); return; }
        if (!(events & (EPOLLOUT | EPOLLIN))) return;
        if (opt.tls) {
            c->ssl = SSL_new(ssl_ctx);
            SSL_set_fd(c->ssl, c->fd);
            SSL_set_tlsext_host_name(c->ssl, "localhost");
            c->state = ST_TLS;
        } else {
            start_upgrade(c);
        }
    }
    if (c->state == ST_TLS) {
        int r = SSL_connect(c->ssl);
        if (r != 1) {
            int e = SSL_get_error(c->ssl, r);
            if (e == SSL_ERROR_WANT_READ) { set_events(c, 0); return; }
            if (e == SSL_ERROR_WANT_WRITE) { set_events(c, 1); return; }
            kill_conn(c, "TLS handshake failed");
            return;
        }
        start_upgrade(c);
    }
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        for (int rounds = 0; rounds < 16 && c->state != ST_DEAD; rounds++) {
            ssize_t n = io_read(c, rbuf, sizeof rbuf);
            if (n == -1) break;
            if (opt.mode == MODE_FANOUT) t_read_us = now_us();
            if (n <= 0 && c->got_close) { cycle_done(c); return; }  // churn: the cycle is complete
            if (n <= 0) { kill_conn(c, n == 0 ? "server closed the connection" : "read failed"); return; }
            const uint8_t *p = rbuf;
            size_t len = (size_t)n;
            if (c->state == ST_UPGRADING) {
                size_t room = sizeof c->hs - 1 - c->hs_len;
                size_t take = len < room ? len : room;
                memcpy(c->hs + c->hs_len, p, take);
                c->hs_len += take;
                c->hs[c->hs_len] = 0;
                char *endh = strstr(c->hs, "\r\n\r\n");
                if (!endh) {
                    if (c->hs_len == sizeof c->hs - 1) { kill_conn(c, "upgrade response too long"); return; }
                    continue;
                }
                if (strncmp(c->hs, "HTTP/1.1 101", 12) != 0) { kill_conn(c, "upgrade refused"); return; }
                if (parse_extensions(c, endh) < 0) { kill_conn(c, "unacceptable Sec-WebSocket-Extensions"); return; }
                size_t used = (size_t)(endh + 4 - c->hs) - (c->hs_len - take);
                became_open(c);
                p += used;
                len -= used;
            }
            if (c->state == ST_OPEN && len) consume(c, p, len);
            if ((size_t)n < sizeof rbuf && !c->ssl) break;
        }
        if (c->state == ST_DEAD) return;
    }
    flush_out(c);
}

static void usage(void) {
    fprintf(stderr,
        "usage: loadgen [--host 127.0.0.1] [--port 9001] [--path /] [--mode echo|fanout|hold|churn]\n"
        "               [--conns N] [--size BYTES] [--binary] [--duration S] [--warmup S]\n"
        "               [--tls] [--pid SERVER_PID] [--window N] [--settle S] [--port2 P]\n"
        "               [--payload fill|json] [--deflate off|shared|takeover] [--level 1-9] [--idle N]\n");
    exit(2);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (strcmp(a, name) == 0 && v && ++i)
        if (ARG("--host")) opt.host = v;
        else if (ARG("--port")) opt.port = atoi(v);
        else if (ARG("--path")) opt.path = v;
        else if (ARG("--mode")) opt.mode = strcmp(v, "echo") == 0 ? MODE_ECHO : strcmp(v, "fanout") == 0 ? MODE_FANOUT
                                         : strcmp(v, "hold") == 0 ? MODE_HOLD : strcmp(v, "churn") == 0 ? MODE_CHURN
                                         : (usage(), MODE_ECHO);
        else if (ARG("--conns")) opt.conns = atoi(v);
        else if (ARG("--size")) opt.size = (size_t)strtoull(v, NULL, 10);
        else if (strcmp(a, "--binary") == 0) opt.binary = 1;
        else if (strcmp(a, "--tls") == 0) opt.tls = 1;
        else if (ARG("--duration")) opt.duration = atof(v);
        else if (ARG("--warmup")) opt.warmup = atof(v);
        else if (ARG("--pid")) opt.pid = atoi(v);
        else if (ARG("--window")) opt.window = atoi(v);
        else if (ARG("--settle")) opt.settle = atof(v);
        else if (ARG("--payload")) opt.json = strcmp(v, "json") == 0 ? 1 : strcmp(v, "fill") == 0 ? 0 : (usage(), 0);
        else if (ARG("--deflate")) opt.deflate = strcmp(v, "off") == 0 ? DEFLATE_OFF : strcmp(v, "shared") == 0 ? DEFLATE_SHARED
                                            : strcmp(v, "takeover") == 0 ? DEFLATE_TAKEOVER : (usage(), 0);
        else if (ARG("--level")) opt.level = atoi(v);
        else if (ARG("--port2")) opt.port2 = atoi(v);
        else if (ARG("--idle")) opt.idle = atoi(v);
        else usage();
#undef ARG
    }
    if (opt.conns < 1 || opt.window < 1) usage();
    if (opt.mode == MODE_HOLD && opt.pid <= 0) die("--mode hold needs --pid");
    if (opt.deflate && opt.mode == MODE_FANOUT) die("--deflate: echo and hold modes only");
    if (opt.json && opt.mode == MODE_FANOUT) die("--payload json: echo and hold modes only");
    if (opt.mode == MODE_FANOUT && opt.size < 16) die("--mode fanout needs --size 16 or more (the payload carries a stamp)");
    if (opt.port2 && opt.mode != MODE_FANOUT) die("--port2: fanout mode only");
    if (opt.mode == MODE_CHURN && (opt.json || opt.deflate)) die("--mode churn: fill payload, no compression");
    if (opt.idle < 0 || (opt.idle && opt.mode != MODE_CHURN)) die("--idle N: churn mode only");
    if (opt.json && opt.size < 64) die("--payload json needs --size 64 or more");
    if (opt.level < 1 || opt.level > 9) usage();
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) { rl.rlim_cur = rl.rlim_max; setrlimit(RLIMIT_NOFILE, &rl); }

    // Churn --idle: the idle connections first (opened first), then the churning ones.
    int total = opt.conns + (opt.mode == MODE_FANOUT ? 1 : 0) + opt.idle;
    conns = calloc((size_t)total, sizeof *conns);
    if (!conns) die("out of memory");
    for (int i = 0; i < total; i++) { conns[i].index = i; conns[i].fd = -1; conns[i].idle = i < opt.idle; }
    if (opt.mode == MODE_FANOUT) { publisher = &conns[opt.conns]; publisher->publisher = 1; }
    build_frame();
    build_pool();
    if (opt.tls) {
        ssl_ctx = SSL_CTX_new(TLS_client_method());
        if (!ssl_ctx) die("SSL_CTX_new failed");
        SSL_CTX_set_verify(ssl_ctx, SSL_VERIFY_NONE, NULL);
        SSL_CTX_set_mode(ssl_ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    }
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1");

    long rss_before = opt.mode == MODE_HOLD ? rss_kib(opt.pid) : 0;
    t_base = now();
    double t0 = now(), t_open = 0, t_measure = 0, t_end = 0, cpu_start = 0, settle_until = 0, server_cpu_start = -1;
    int real_total = opt.conns;
    opt.conns = total;  // open the publisher too
    struct epoll_event evs[1024];
    if (opt.mode == MODE_HOLD) measuring = 1;  // bytes of the one message per connection
    while (!done) {
        open_more();
        int n = epoll_wait(ep, evs, 1024, 50);
        for (int i = 0; i < n; i++) on_event(evs[i].data.ptr, evs[i].events);
        if (opt.mode == MODE_FANOUT) publish_if_window();
        double t = now();
        if (!t_open && all_open() && hold_pending == 0 && (opt.mode != MODE_FANOUT || primed || opened == 0)
            && (idle_opened == opt.idle || failed)) {
            t_open = t;
            if (opened == 0) die("no connection could be opened");
            t_measure = t + opt.warmup;
            t_end = t_measure + opt.duration;
            settle_until = t + opt.settle;
        }
        if (!t_open && t - t0 > 120)
            die(all_open() ? "subscribers did not all receive a probe within 120 s" : "connections did not open within 120 s");
        if (t_open && opt.mode != MODE_HOLD) {
            if (!measuring && t >= t_measure && t < t_end) {
                measuring = 1;
                cpu_start = cpu_seconds();
                if (opt.pid > 0) server_cpu_start = process_cpu_seconds(opt.pid);
            }
            if (t >= t_end) done = 1;
        }
        if (t_open && opt.mode == MODE_HOLD && t >= settle_until) done = 1;
    }
    opt.conns = real_total;
    double cpu = cpu_seconds() - cpu_start;
    double server_cpu = opt.pid > 0 && server_cpu_start >= 0 ? process_cpu_seconds(opt.pid) - server_cpu_start : -1;
    if (opt.mode == MODE_CHURN) {
        double per_s = (double)measured_cycles / opt.duration;
        char server[128] = "";
        if (server_cpu >= 0 && measured_cycles)
            snprintf(server, sizeof server, " server_cpu_s=%.3f server_cpu_s_per_1000=%.4f server_rss_kib=%ld", server_cpu,
                     server_cpu * 1000.0 / (double)measured_cycles, rss_kib(opt.pid));
        printf("result mode=churn conns=%d size=%zu tls=%d cycles_per_s=%.0f cycles=%llu errors=%llu failed=%llu "
               "loadgen_cpu=%.0f%% idle=%d%s\n",
               real_total, opt.size, opt.tls, per_s, (unsigned long long)measured_cycles, (unsigned long long)errors,
               (unsigned long long)failed, 100.0 * cpu / opt.duration, opt.idle, server);
        if (measured_cycles == 0) fprintf(stderr, "loadgen: no cycle completed in the measured window\n");
        return (errors || failed || measured_cycles == 0) ? 1 : 0;
    }
    // The deflate fields (after the classic ones, so existing parsers are unaffected).
    char extra[512];
    uint64_t payload = payload_sent + payload_recv, wire = wire_sent + wire_recv;
    snprintf(extra, sizeof extra,
             "payload=%s deflate=%s negotiated=%llu declined=%llu mismatches=%llu payload_sent=%llu wire_sent=%llu "
             "payload_recv=%llu wire_recv=%llu saved_pct=%.1f",
             opt.json ? "json" : "fill", opt.deflate == DEFLATE_SHARED ? "shared" : opt.deflate == DEFLATE_TAKEOVER ? "takeover" : "off",
             (unsigned long long)negotiated, (unsigned long long)declined, (unsigned long long)mismatches,
             (unsigned long long)payload_sent, (unsigned long long)wire_sent, (unsigned long long)payload_recv,
             (unsigned long long)wire_recv, payload ? 100.0 * (1.0 - (double)wire / (double)payload) : 0.0);
    if (mismatches) fprintf(stderr, "loadgen: %llu echoes did not match what was sent\n", (unsigned long long)mismatches);
    if (opt.mode == MODE_HOLD) {
        long rss_after = rss_kib(opt.pid);
        printf("result mode=hold conns=%d opened=%llu failed=%llu rss_before_kib=%ld rss_after_kib=%ld "
               "kib_per_conn=%.2f open_seconds=%.2f errors=%llu %s\n",
               real_total, (unsigned long long)opened, (unsigned long long)failed, rss_before, rss_after,
               opened ? (double)(rss_after - rss_before) / (double)opened : 0.0, t_open - t0,
               (unsigned long long)errors, extra);
        return (failed || errors || mismatches) ? 1 : 0;
    }
    double per_s = (double)measured_msgs / opt.duration;
    char latency[256] = "";
    if (opt.mode == MODE_FANOUT)
        snprintf(latency, sizeof latency, " lat_p50_us=%llu lat_p99_us=%llu lat_max_us=%llu lat_samples=%llu lost=%llu",
                 (unsigned long long)lat_percentile(0.50), (unsigned long long)lat_percentile(0.99),
                 (unsigned long long)lat_max, (unsigned long long)lat_count, (unsigned long long)lost);
    printf("result mode=%s conns=%d size=%zu %s=%.0f msgs=%llu mb_per_s=%.1f errors=%llu failed=%llu loadgen_cpu=%.0f%% %s%s\n",
           opt.mode == MODE_ECHO ? "echo" : "fanout", real_total, opt.size,
           opt.mode == MODE_ECHO ? "round_trips_per_s" : "deliveries_per_s", per_s, (unsigned long long)measured_msgs,
           per_s * (double)opt.size / 1e6, (unsigned long long)errors, (unsigned long long)failed,
           100.0 * cpu / opt.duration, extra, latency);
    if (measured_msgs == 0) fprintf(stderr, "loadgen: nothing was received in the measured window\n");
    return (errors || failed || mismatches || measured_msgs == 0) ? 1 : 0;
}
