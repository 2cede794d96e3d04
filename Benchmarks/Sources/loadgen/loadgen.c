// loadgen: a WebSocket load generator over raw epoll (one thread), for Switchboard's benchmarks.
//
// Modes
//   echo    N connections; each sends one masked frame, waits for the whole echo, repeats.
//           Prints round trips per second and echoed payload MB/s over the measured window.
//   fanout  1 publisher and N subscribers on the same path (a server that relays every message
//           to the path's other connections). The publisher keeps at most --window messages
//           ahead of the slowest subscriber. Prints deliveries per second.
//   hold    opens N connections, upgrades them, leaves them idle, then reads the server's
//           VmRSS from /proc/PID/status and prints KiB per connection.
//
// Every mode prints one machine-readable line starting with "result ", plus loadgen's own CPU
// use over the window: under 100% means the load generator was waiting for the server, i.e.
// the server, not the generator, was the bottleneck.
//
// --tls speaks wss (certificate not verified: the benchmark uses a throwaway self-signed one).
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

enum mode { MODE_ECHO, MODE_FANOUT, MODE_HOLD };
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
    int awaiting;            // echo: a round trip is in flight
    uint64_t received;       // messages fully received
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
} opt = {"127.0.0.1", 9001, "/", MODE_ECHO, 100, 16, 0, 5, 1, 0, 0, 8, 200, 3};

static int ep;
static conn *conns;
static SSL_CTX *ssl_ctx;
static uint8_t *frame;       // the masked data frame every connection sends
static size_t frame_len;
static char request[512];
static size_t request_len;
static int measuring, done;
static uint64_t measured_msgs, errors, opened, failed;
static uint64_t published;   // fanout: messages the publisher has sent

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

static void build_frame(void) {
    static const uint8_t key[4] = {0x37, 0xfa, 0x21, 0x3d};
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
    request_len = (size_t)snprintf(request, sizeof request,
        "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        opt.path, opt.host, opt.port);
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
    if (getenv("LOADGEN_VERBOSE")) fprintf(stderr, "loadgen: connection %d: %s\n", c->index, why);
    c->state = ST_DEAD;
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    if (c->ssl) { SSL_free(c->ssl); c->ssl = NULL; }
    close(c->fd);
}

static void open_conn(conn *c) {
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opt.port)};
    if (inet_pton(AF_INET, opt.host, &sa.sin_addr) != 1) die("--host must be an IPv4 address");
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) die("socket() failed (raise ulimit -n?)");
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->state = ST_CONNECTING;
    connecting_now++;
    int r = connect(c->fd, (struct sockaddr *)&sa, sizeof sa);
    if (r < 0 && errno != EINPROGRESS) { c->state = ST_UPGRADING; kill_conn(c, "connect failed"); return; }
    c->want_write = 1;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) die("epoll_ctl");
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

static void send_frame(conn *c) {
    c->out = frame;
    c->out_len = frame_len;
    c->out_off = 0;
}

static conn *publisher;
static uint64_t min_received(void) {
    uint64_t m = UINT64_MAX;
    for (int i = 0; i < opt.conns; i++)
        if (!conns[i].publisher && conns[i].state == ST_OPEN && conns[i].received < m) m = conns[i].received;
    return m;
}

static int all_open(void) { return (uint64_t)opt.conns == opened + failed; }

static void publish_if_window(void) {
    if (!publisher || publisher->state != ST_OPEN || publisher->out || !all_open()) return;
    static uint64_t slowest;
    if (published - slowest >= (uint64_t)opt.window) slowest = min_received();
    if (published - slowest >= (uint64_t)opt.window) return;
    published++;
    send_frame(publisher);
    flush_out(publisher);
}

static void message_done(conn *c) {
    c->received++;
    if (opt.mode == MODE_ECHO) {
        if (measuring) measured_msgs++;
        c->awaiting = 0;
        if (!done) { send_frame(c); c->awaiting = 1; }
    } else if (opt.mode == MODE_FANOUT) {
        if (measuring) measured_msgs++;
    }
}

static void frame_done(conn *c) {
    switch (c->opcode) {
    case 0x8:
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
    if (opt.mode == MODE_ECHO && !done) { send_frame(c); c->awaiting = 1; }
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
        "usage: loadgen [--host 127.0.0.1] [--port 9001] [--path /] [--mode echo|fanout|hold]\n"
        "               [--conns N] [--size BYTES] [--binary] [--duration S] [--warmup S]\n"
        "               [--tls] [--pid SERVER_PID] [--window N] [--settle S]\n");
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
                                         : strcmp(v, "hold") == 0 ? MODE_HOLD : (usage(), MODE_ECHO);
        else if (ARG("--conns")) opt.conns = atoi(v);
        else if (ARG("--size")) opt.size = (size_t)strtoull(v, NULL, 10);
        else if (strcmp(a, "--binary") == 0) opt.binary = 1;
        else if (strcmp(a, "--tls") == 0) opt.tls = 1;
        else if (ARG("--duration")) opt.duration = atof(v);
        else if (ARG("--warmup")) opt.warmup = atof(v);
        else if (ARG("--pid")) opt.pid = atoi(v);
        else if (ARG("--window")) opt.window = atoi(v);
        else if (ARG("--settle")) opt.settle = atof(v);
        else usage();
#undef ARG
    }
    if (opt.conns < 1 || opt.window < 1) usage();
    if (opt.mode == MODE_HOLD && opt.pid <= 0) die("--mode hold needs --pid");
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) { rl.rlim_cur = rl.rlim_max; setrlimit(RLIMIT_NOFILE, &rl); }

    int total = opt.conns + (opt.mode == MODE_FANOUT ? 1 : 0);
    conns = calloc((size_t)total, sizeof *conns);
    if (!conns) die("out of memory");
    for (int i = 0; i < total; i++) { conns[i].index = i; conns[i].fd = -1; }
    if (opt.mode == MODE_FANOUT) { publisher = &conns[opt.conns]; publisher->publisher = 1; }
    build_frame();
    if (opt.tls) {
        ssl_ctx = SSL_CTX_new(TLS_client_method());
        if (!ssl_ctx) die("SSL_CTX_new failed");
        SSL_CTX_set_verify(ssl_ctx, SSL_VERIFY_NONE, NULL);
        SSL_CTX_set_mode(ssl_ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    }
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1");

    long rss_before = opt.mode == MODE_HOLD ? rss_kib(opt.pid) : 0;
    double t0 = now(), t_open = 0, t_measure = 0, t_end = 0, cpu_start = 0, settle_until = 0;
    int real_total = opt.conns;
    opt.conns = total;  // open the publisher too
    struct epoll_event evs[1024];
    while (!done) {
        open_more();
        int n = epoll_wait(ep, evs, 1024, 50);
        for (int i = 0; i < n; i++) on_event(evs[i].data.ptr, evs[i].events);
        if (opt.mode == MODE_FANOUT) publish_if_window();
        double t = now();
        if (!t_open && all_open()) {
            t_open = t;
            if (opened == 0) die("no connection could be opened");
            t_measure = t + opt.warmup;
            t_end = t_measure + opt.duration;
            settle_until = t + opt.settle;
        }
        if (!t_open && t - t0 > 120) die("connections did not open within 120 s");
        if (t_open && opt.mode != MODE_HOLD) {
            if (!measuring && t >= t_measure && t < t_end) { measuring = 1; cpu_start = cpu_seconds(); }
            if (t >= t_end) done = 1;
        }
        if (t_open && opt.mode == MODE_HOLD && t >= settle_until) done = 1;
    }
    opt.conns = real_total;
    double cpu = cpu_seconds() - cpu_start;
    if (opt.mode == MODE_HOLD) {
        long rss_after = rss_kib(opt.pid);
        printf("result mode=hold conns=%d opened=%llu failed=%llu rss_before_kib=%ld rss_after_kib=%ld "
               "kib_per_conn=%.2f open_seconds=%.2f\n",
               real_total, (unsigned long long)opened, (unsigned long long)failed, rss_before, rss_after,
               opened ? (double)(rss_after - rss_before) / (double)opened : 0.0, t_open - t0);
        return failed ? 1 : 0;
    }
    double per_s = (double)measured_msgs / opt.duration;
    printf("result mode=%s conns=%d size=%zu %s=%.0f mb_per_s=%.1f errors=%llu failed=%llu loadgen_cpu=%.0f%%\n",
           opt.mode == MODE_ECHO ? "echo" : "fanout", real_total, opt.size,
           opt.mode == MODE_ECHO ? "round_trips_per_s" : "deliveries_per_s", per_s,
           per_s * (double)opt.size / 1e6, (unsigned long long)errors, (unsigned long long)failed,
           100.0 * cpu / opt.duration);
    if (measured_msgs == 0) fprintf(stderr, "loadgen: nothing was received in the measured window\n");
    return (errors || failed || measured_msgs == 0) ? 1 : 0;
}
