// line-streamer: a WebSocket server that streams newline-delimited text as fast as the socket
// takes it, for the client benchmark's receive-only scenario (Benchmarks/run.sh, client-stream-*).
//
// Every connection (any path) gets, after the upgrade, an endless run of unmasked text frames,
// each holding --lines lines of --size bytes (the last byte of each line is '\n'). Written
// non-blocking over epoll: the server writes until the socket would block, so the client's
// receiving speed is what is measured. What the client sends is ignored except a ping (answered
// with a pong) and a close (answered with a close, then the connection ends). Single-threaded;
// C, so it is never the bottleneck.
//
// Prints `line-streamer listening on ws://HOST:PORT` once bound (--port 0: an ephemeral port),
// then serves until SIGTERM or SIGINT.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

enum state { ST_HANDSHAKE, ST_STREAM, ST_CLOSING };

typedef struct conn {
    int fd;
    enum state state;
    char req[4096];            // upgrade request
    size_t req_len;
    char resp[256];            // upgrade response, while being written
    size_t resp_len, resp_off;
    size_t off;                // position in the stream chunk (a frame boundary when off % frame_len == 0)
    uint8_t ctrl[2 * (2 + 125)];  // pending pong / close, written between data frames
    size_t ctrl_len;
    int close_queued;          // our close is in ctrl (or sent): no more data frames
    // Incoming frame parser: header bytes, then payload (kept only for control frames).
    uint8_t hdr[14];
    int hdr_len, hdr_need;
    uint64_t payload_left;
    int opcode;
    uint8_t mask[4];
    uint8_t cpay[125];
    int cpay_len;
} conn;

static struct {
    const char *host;
    int port;
    int lines;
    int size;
} opt = {"127.0.0.1", 0, 16, 60};

static int ep;
static uint8_t *chunk;         // many whole frames back to back, written in a cycle
static size_t chunk_len, frame_len;
static volatile sig_atomic_t stop;

static void die(const char *msg) {
    fprintf(stderr, "line-streamer: %s\n", msg);
    exit(2);
}

static void on_signal(int sig) { (void)sig; stop = 1; }

static void build_chunk(void) {
    size_t payload = (size_t)opt.lines * (size_t)opt.size;
    size_t h = payload >= 65536 ? 10 : payload >= 126 ? 4 : 2;
    frame_len = h + payload;
    size_t frames = (64 * 1024) / frame_len;
    if (frames < 1) frames = 1;
    chunk_len = frames * frame_len;
    chunk = malloc(chunk_len);
    if (!chunk) die("out of memory");
    uint64_t line_no = 0;
    for (size_t f = 0; f < frames; f++) {
        uint8_t *p = chunk + f * frame_len;
        p[0] = 0x81;  // FIN, text
        if (h == 10) {
            p[1] = 127;
            for (int i = 0; i < 8; i++) p[2 + i] = (uint8_t)((uint64_t)payload >> (56 - 8 * i));
        } else if (h == 4) {
            p[1] = 126;
            p[2] = (uint8_t)(payload >> 8);
            p[3] = (uint8_t)payload;
        } else {
            p[1] = (uint8_t)payload;
        }
        uint8_t *d = p + h;
        for (int l = 0; l < opt.lines; l++, line_no++) {
            uint8_t *line = d + (size_t)l * (size_t)opt.size;
            // "line 000123 abcd…\n": ASCII (valid UTF-8), exactly --size bytes.
            char head[32];
            int n = snprintf(head, sizeof head, "line %06llu ", (unsigned long long)(line_no % 1000000));
            for (int i = 0; i < opt.size - 1; i++)
                line[i] = i < n ? (uint8_t)head[i] : (uint8_t)('a' + i % 26);
            line[opt.size - 1] = '\n';
        }
    }
}

static void kill_conn(conn *c) {
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c);
}

// Sec-WebSocket-Accept: base64(SHA-1(key + GUID)).
static int accept_value(const char *key, size_t key_len, char out[64]) {
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    char buf[128];
    if (key_len == 0 || key_len + sizeof guid > sizeof buf) return -1;
    memcpy(buf, key, key_len);
    memcpy(buf + key_len, guid, sizeof guid - 1);
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    if (!EVP_Digest(buf, key_len + sizeof guid - 1, digest, &dlen, EVP_sha1(), NULL)) return -1;
    EVP_EncodeBlock((unsigned char *)out, digest, (int)dlen);
    return 0;
}

// Returns the value of header `name` in the request (trimmed), or NULL.
static const char *header_value(const char *req, const char *name, size_t *len) {
    size_t nl = strlen(name);
    const char *line = strstr(req, "\r\n");
    while (line && line[2] != '\r') {
        line += 2;
        if (strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
            const char *v = line + nl + 1;
            while (*v == ' ' || *v == '\t') v++;
            const char *e = strstr(v, "\r\n");
            if (!e) return NULL;
            while (e > v && (e[-1] == ' ' || e[-1] == '\t')) e--;
            *len = (size_t)(e - v);
            return v;
        }
        line = strstr(line, "\r\n");
    }
    return NULL;
}

// Queues a control frame (pong or close) to go out at the next frame boundary.
static void queue_control(conn *c, int opcode, const uint8_t *payload, int len) {
    if (c->close_queued) return;
    if (c->ctrl_len + 2 + (size_t)len > sizeof c->ctrl) return;  // a pong already pending is enough
    uint8_t *p = c->ctrl + c->ctrl_len;
    p[0] = (uint8_t)(0x80 | opcode);
    p[1] = (uint8_t)len;
    memcpy(p + 2, payload, (size_t)len);
    c->ctrl_len += 2 + (size_t)len;
    if (opcode == 0x8) c->close_queued = 1;
}

static void control_frame(conn *c) {
    if (c->opcode == 0x9) {
        queue_control(c, 0xA, c->cpay, c->cpay_len);
    } else if (c->opcode == 0x8) {
        // Echo the status code (first two bytes) back, as RFC 6455 §5.5.1 suggests.
        queue_control(c, 0x8, c->cpay, c->cpay_len >= 2 ? 2 : 0);
    }
}

// Parses what the client sends (masked frames): only control frames matter.
static void consume(conn *c, const uint8_t *p, size_t n) {
    const uint8_t *end = p + n;
    while (p < end) {
        if (c->hdr_need > c->hdr_len) {
            while (c->hdr_len < c->hdr_need && p < end) {
                c->hdr[c->hdr_len++] = *p++;
                if (c->hdr_len == 2) {
                    int l7 = c->hdr[1] & 0x7f;
                    c->hdr_need = 2 + (l7 == 126 ? 2 : l7 == 127 ? 8 : 0) + ((c->hdr[1] & 0x80) ? 4 : 0);
                }
            }
            if (c->hdr_len < c->hdr_need) return;
            int l7 = c->hdr[1] & 0x7f, at = 2;
            uint64_t len = (uint64_t)l7;
            if (l7 == 126) { len = ((uint64_t)c->hdr[2] << 8) | c->hdr[3]; at = 4; }
            else if (l7 == 127) { len = 0; for (int i = 0; i < 8; i++) len = (len << 8) | c->hdr[2 + i]; at = 10; }
            if (c->hdr[1] & 0x80) memcpy(c->mask, c->hdr + at, 4); else memset(c->mask, 0, 4);
            c->opcode = c->hdr[0] & 0x0f;
            c->payload_left = len;
            c->cpay_len = 0;
            c->hdr_len = 0;
            c->hdr_need = 0;  // now in the payload
            if (c->opcode >= 0x8 && len > 125) { c->opcode = 0x8; c->cpay_len = 0; len = 0; c->payload_left = 0; }
            if (len == 0) {
                c->hdr_need = 2;
                if (c->opcode >= 0x8) control_frame(c);
            }
            continue;
        }
        size_t take = (size_t)(c->payload_left < (uint64_t)(end - p) ? c->payload_left : (uint64_t)(end - p));
        if (c->opcode >= 0x8)
            for (size_t i = 0; i < take; i++, c->cpay_len++) c->cpay[c->cpay_len] = p[i] ^ c->mask[c->cpay_len % 4];
        p += take;
        c->payload_left -= take;
        if (c->payload_left == 0) {
            c->hdr_need = 2;
            if (c->opcode >= 0x8) control_frame(c);
        }
    }
}

// Writes until the socket would block. Returns -1 when the connection is gone.
static int pump(conn *c) {
    for (;;) {
        ssize_t n;
        if (c->state == ST_HANDSHAKE) {
            n = send(c->fd, c->resp + c->resp_off, c->resp_len - c->resp_off, MSG_NOSIGNAL);
            if (n > 0) {
                c->resp_off += (size_t)n;
                if (c->resp_off == c->resp_len) c->state = ST_STREAM;
                continue;
            }
        } else if (c->ctrl_len && c->off % frame_len == 0) {
            n = send(c->fd, c->ctrl, c->ctrl_len, MSG_NOSIGNAL);
            if (n > 0) {
                memmove(c->ctrl, c->ctrl + n, c->ctrl_len - (size_t)n);
                c->ctrl_len -= (size_t)n;
                if (c->ctrl_len == 0 && c->close_queued) {
                    // Our close is out: half-close, then read until the client's EOF.
                    shutdown(c->fd, SHUT_WR);
                    c->state = ST_CLOSING;
                    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                    return 0;
                }
                continue;
            }
        } else if (c->state == ST_STREAM) {
            // Up to the end of the chunk, or to the next frame boundary when a control frame waits.
            size_t end = chunk_len;
            if (c->ctrl_len) end = (c->off / frame_len + 1) * frame_len;
            n = send(c->fd, chunk + c->off, end - c->off, MSG_NOSIGNAL);
            if (n > 0) {
                c->off += (size_t)n;
                if (c->off == chunk_len) c->off = 0;
                continue;
            }
        } else {
            return 0;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
        kill_conn(c);
        return -1;
    }
}

static uint8_t rbuf[64 * 1024];

// Reads what is there. Returns -1 when the connection is gone.
static int on_readable(conn *c) {
    for (;;) {
        ssize_t n = read(c->fd, rbuf, sizeof rbuf);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
        if (n <= 0) { kill_conn(c); return -1; }  // EOF or error: done with this client
        if (c->state == ST_CLOSING) continue;  // draining until EOF
        const uint8_t *p = rbuf;
        size_t len = (size_t)n;
        if (c->state == ST_HANDSHAKE && !c->resp_len) {
            size_t room = sizeof c->req - 1 - c->req_len;
            size_t take = len < room ? len : room;
            memcpy(c->req + c->req_len, p, take);
            c->req_len += take;
            c->req[c->req_len] = 0;
            char *endh = strstr(c->req, "\r\n\r\n");
            if (!endh) {
                if (c->req_len == sizeof c->req - 1) { kill_conn(c); return -1; }
                continue;
            }
            size_t key_len = 0;
            const char *key = header_value(c->req, "Sec-WebSocket-Key", &key_len);
            char acc[64];
            if (!key || accept_value(key, key_len, acc) != 0) {
                static const char bad[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                send(c->fd, bad, sizeof bad - 1, MSG_NOSIGNAL);
                kill_conn(c);
                return -1;
            }
            c->resp_len = (size_t)snprintf(c->resp, sizeof c->resp,
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Accept: %s\r\n\r\n", acc);
            c->hdr_need = 2;
            // Level-triggered EPOLLOUT from now on: the socket is kept full.
            struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
            epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
            size_t used = (size_t)(endh + 4 - c->req) - (c->req_len - take);
            if (len > used) consume(c, p + used, len - used);
            continue;
        }
        consume(c, p, len);
    }
}

static void usage(void) {
    fprintf(stderr, "usage: line-streamer [--host 127.0.0.1] [--port 0] [--lines 16 (per frame)] [--size 60 (bytes per line)]\n");
    exit(2);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (strcmp(a, name) == 0 && v && ++i)
        if (ARG("--host")) opt.host = v;
        else if (ARG("--port")) opt.port = atoi(v);
        else if (ARG("--lines")) opt.lines = atoi(v);
        else if (ARG("--size")) opt.size = atoi(v);
        else usage();
#undef ARG
    }
    if (opt.lines < 1 || opt.size < 2 || opt.port < 0 || opt.port > 65535) usage();
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    build_chunk();

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0) die("socket() failed");
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opt.port)};
    if (inet_pton(AF_INET, opt.host, &addr.sin_addr) != 1) die("--host must be an IPv4 address");
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0) die("bind() failed");
    if (listen(lfd, 128) < 0) die("listen() failed");
    socklen_t alen = sizeof addr;
    getsockname(lfd, (struct sockaddr *)&addr, &alen);
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1");
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev);
    printf("line-streamer listening on ws://%s:%d\n", opt.host, ntohs(addr.sin_port));
    fflush(stdout);

    struct epoll_event evs[64];
    while (!stop) {
        int n = epoll_wait(ep, evs, 64, 200);
        for (int i = 0; i < n; i++) {
            conn *c = evs[i].data.ptr;
            if (!c) {
                int fd;
                while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    conn *nc = calloc(1, sizeof *nc);
                    if (!nc) { close(fd); continue; }
                    nc->fd = fd;
                    nc->state = ST_HANDSHAKE;
                    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = nc};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
                }
                continue;
            }
            uint32_t e = evs[i].events;
            if ((e & (EPOLLIN | EPOLLHUP | EPOLLERR)) && on_readable(c) < 0) continue;
            if (c->state != ST_CLOSING && c->resp_len) pump(c);
        }
    }
    return 0;
}
