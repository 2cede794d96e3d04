#!/usr/bin/env bash
# Switchboard against its peers, side by side, in one run; prints Markdown tables: servers (with
# bytes on the wire, and fan-out across processes through Redis), then clients.
#
#   Benchmarks/run.sh              # everything: ~17 min on a fresh clone of a 2-core machine
#   QUICK=1 Benchmarks/run.sh      # one short round, to check the set-up (~4 min once built)
#
# Builds in release: Switchboard's echo-server, and from this package the load generator,
# a raw SwiftNIO echo server, a Hummingbird 2 echo server, the client benchmark and its line
# streamer (and the micro benchmarks, run with MICRO=1). Python websockets is a peer, and
# uWebSockets when its prebuilt servers are found (UWS_DIR, below). Each server runs with one
# event loop, pinned to CPU 0; the load generator runs on CPU 1. Every server × scenario is
# measured RUNS times (3), in rounds that interleave the servers; the table shows the median and
# min–max, then the ratio Switchboard / peer of the medians.
#
# Servers: "uws" is uWebSockets (uws-echo; uws-fanout for the fanout-* scenario; no TLS);
# "switchboard" is echo-server with callback routes (WebSocketCallbacks: no task per
# connection), "switchboard-tasks" the same server with a task per connection iterating
# messages(); "nio" a raw SwiftNIO NIOWebSocket handler; "hummingbird" Hummingbird 2's
# WebSocket router; "python" websockets 17 (asyncio); "switchboard-uring" and
# "switchboard-tasks-uring" the first two on the io_uring event loop (SWITCHBOARD_EVENT_LOOP=io_uring).
#
# Compression (permessage-deflate, RFC 7692): the echo-json-* scenarios send JSON-like text
# messages of 1 KiB (loadgen --payload json); echo-json-1KiB-100c uncompressed (the baseline,
# every server), the *-deflate-shared-* ones with loadgen offering "server_no_context_takeover;
# client_no_context_takeover", the *-deflate-takeover-* ones offering context takeover. For those,
# the servers run with compression on: echo-server as is (shared per-loop streams, no context
# takeover) or with --context-takeover (dedicated streams per connection), uws-echo with
# UWS_COMPRESSION=shared or dedicated, the Python peer with --deflate (websockets' defaults,
# context takeover unless the client asks for none); raw SwiftNIO and Hummingbird are left out.
# loadgen checks every echo and counts frame bytes; a third table gives the bytes on the wire
# saved (1 - frame bytes / message bytes). hold-idle-json and hold-idle-deflate-* measure memory
# per idle connection after ONE 1 KiB JSON message and its echo (so that per-connection zlib
# streams exist), without compression and in each mode; hold-idle stays as it was (no message).
# hold-idle-deflate-takeover-45s measures 45 s after that message instead: long enough for
# echo-server's keepalive (20 s) to release an idle connection's dedicated compressor.
#
# Fan-out across processes through Redis (fanout-redis-16B-1000subs; after the server rounds, its
# own table, for information only: not compared with uWebSockets, since 2 cores cannot pin the
# four processes): 1,000 subscribers of echo-server's /broadcast and one publisher (loadgen
# --mode fanout), for each Switchboard server style, in three set-ups: "1 process" (no Redis),
# "1 process + Redis" (echo-server --redis: every publish also goes through Redis and comes back),
# and "2 processes + Redis" (two echo-servers with the same --redis; loadgen --port2 puts every
# other subscriber on the second, the publisher on the first), and "2 processes + Redis Cluster"
# (the same with a three-master Redis Cluster: sharded pub/sub). One redis-server (installed when
# missing, started on a free port with --save "" --appendonly no, stopped at the end) on CPU 1
# with loadgen; every echo-server on CPU 0 with one event loop, so the two processes share the
# single process's core. Each set-up runs loadgen twice: --window 4 (the fanout-16B-1000subs
# load: deliveries/s, and latency under that load) and --window 1 (one message in flight: the
# fan-out latency without queueing). Latency: publish → delivery, p50 and p99 over every delivery
# in the window (loadgen stamps each payload). The table adds the latency added over "1 process".
#
# Clients (after the server rounds; CLIENTS=0 skips them): "sb-client" is client-bench
# (Switchboard's SocketAdapter: lines in, send(command:) out), "python-client" websockets 17
# (asyncio), "node-client" Node.js with Debian's node-ws. Scenarios: client-pipelined-60B-w64
# sends 60-byte lines with 64 in flight to an echo server (uws-echo when present, else
# Switchboard's echo-server with callbacks) from a separate sending task; client-reply-60B-w64
# the same 64 lines in flight, each answered from the receiving loop (`for await line in lines
# { send(command:) }`, the shape applications write), with its round-trip p99 as the row
# client-reply-60B-w64-p99, and (Switchboard only) the same loop on the main actor, as top-level
# code runs it, over the AsyncStream (-main) and over SocketLines (-seq-main); client-stream-60B
# receives the lines line-streamer writes as fast as it can (-seq: over SocketLines, Switchboard
# only). Clients run on CPU 1, the server on CPU 0; the result is lines/s.
#
# uWebSockets: prebuilt uws-echo and uws-fanout, looked for in UWS_DIR (default ../shared/peers
# beside this repository). Never part of the project; without them the "uws" server is skipped.
# To build them (see Benchmarks/README.md): uNetworking/uWebSockets at commit
# 66dcff3dd48f0c19dd1703426365d062039321d0 with uNetworking/uSockets at commit
# 86097c490263ab662d62e8e7b541390bdec7d149 checked out as its uSockets/, then in that checkout
#   make -C uSockets
#   g++ -std=c++20 -O3 -flto -Isrc -IuSockets/src uws_echo.cpp uSockets/*.o -lz -o uws-echo
#   g++ -std=c++20 -O3 -flto -Isrc -IuSockets/src uws_fanout.cpp uSockets/*.o -lz -o uws-fanout
# (uws_echo.cpp and uws_fanout.cpp come with the prebuilt servers). They listen on $PORT and
# cannot take port 0, so this script picks a free port from 19000 up.
#
# Settings (environment): RUNS=3 DURATION=1.5 (s measured) WARMUP=0.3 (s) HOLD_CONNS=10000
# SERVERS="uws switchboard switchboard-tasks nio hummingbird python" (uws only when found)
# SCENARIOS="<names below>" UWS_DIR=<folder with uws-echo and uws-fanout>
# CLIENTS=0 (skip the client benchmark) CLIENT_LIST="sb-client python-client node-client"
# CLIENT_SCENARIOS="<client names below>" BASE_BIN=<folder with a baseline release echo-server:
# adds the servers "base" and "base-tasks", for before/after comparisons in one interleaved run>
# OUT=<results dir> SWITCHBOARD_BIN=<folder with a release echo-server, e.g. another checkout's
# .build/release, for before/after comparisons; default: this checkout's, built here; the
# client benchmark always uses this checkout's library>
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$here"
. "$root/scripts/lib/deps.sh"

RUNS=${RUNS:-3}
DURATION=${DURATION:-1.5}
WARMUP=${WARMUP:-0.3}
HOLD_CONNS=${HOLD_CONNS:-10000}
UWS_DIR=${UWS_DIR:-"$root/../shared/peers"}
uwsdir=""
if [ -x "$UWS_DIR/uws-echo" ] && [ -x "$UWS_DIR/uws-fanout" ]; then
    uwsdir="$(cd "$UWS_DIR" && pwd)"
    SERVERS=${SERVERS:-"uws switchboard switchboard-tasks nio hummingbird python"}
else
    SERVERS=${SERVERS:-"switchboard switchboard-tasks nio hummingbird python"}
    say "uWebSockets peers (uws-echo, uws-fanout) not found in $UWS_DIR: skipping the uws server;"
    say "  build them as Benchmarks/README.md describes (uWebSockets 66dcff3, uSockets 86097c4) and set UWS_DIR"
    SERVERS=$(echo "$SERVERS" | tr ' ' '\n' | grep -vx uws | xargs || true)
fi
CLIENTS=${CLIENTS:-1}
CLIENT_LIST=${CLIENT_LIST:-"sb-client python-client node-client"}
OUT=${OUT:-"$here/.build/results"}
if [ -n "${QUICK:-}" ]; then
    RUNS=1; DURATION=1; WARMUP=0.3; HOLD_CONNS=${HOLD_CONNS_QUICK:-2000}
fi

# name | loadgen arguments | reported field | unit
ALL_SCENARIOS="
echo-text-16B-1c|--conns 1 --size 16|round_trips_per_s|round trips/s
echo-text-16B-100c|--conns 100 --size 16|round_trips_per_s|round trips/s
echo-text-16B-1000c|--conns 1000 --size 16|round_trips_per_s|round trips/s
echo-binary-16B-1c|--conns 1 --size 16 --binary|round_trips_per_s|round trips/s
echo-binary-16B-100c|--conns 100 --size 16 --binary|round_trips_per_s|round trips/s
echo-binary-16B-1000c|--conns 1000 --size 16 --binary|round_trips_per_s|round trips/s
echo-binary-64KiB-10c|--conns 10 --size 65536 --binary|mb_per_s|MB/s echoed
echo-binary-1MiB-10c|--conns 10 --size 1048576 --binary|mb_per_s|MB/s echoed
fanout-16B-1000subs|--mode fanout --conns 1000 --size 16 --path /broadcast --window 4|deliveries_per_s|deliveries/s
fanout-redis-16B-1000subs|--mode fanout --conns 1000 --size 16 --path /broadcast|deliveries_per_s|deliveries/s and latency, 1 vs 2 processes through Redis (own table)
tls-echo-text-16B-100c|--tls --conns 100 --size 16|round_trips_per_s|round trips/s
churn-16B-50c|--mode churn --conns 50 --size 16|server_cpu_s_per_1000|server CPU-seconds per 1,000 connect-echo-close cycles (lower is better)
tls-churn-16B-50c|--tls --mode churn --conns 50 --size 16|server_cpu_s_per_1000|server CPU-seconds per 1,000 TLS connect-echo-close cycles (lower is better)
churn-16B-50c-2000idle|--mode churn --conns 50 --size 16 --idle 2000|server_cpu_s_per_1000|server CPU-seconds per 1,000 cycles beside 2,000 idle connections (lower is better; each round prints the server's server_rss_kib)
hold-idle|--mode hold --conns $HOLD_CONNS --settle 3|kib_per_conn|KiB RSS per idle connection
echo-json-1KiB-100c|--conns 100 --size 1024 --payload json|round_trips_per_s|round trips/s
echo-json-1KiB-deflate-shared-100c|--conns 100 --size 1024 --payload json --deflate shared|round_trips_per_s|round trips/s
echo-json-1KiB-deflate-takeover-100c|--conns 100 --size 1024 --payload json --deflate takeover|round_trips_per_s|round trips/s
hold-idle-json|--mode hold --conns $HOLD_CONNS --settle 3 --payload json --size 1024|kib_per_conn|KiB RSS per idle connection (after one 1 KiB message)
hold-idle-deflate-shared|--mode hold --conns $HOLD_CONNS --settle 3 --payload json --size 1024 --deflate shared|kib_per_conn|KiB RSS per idle connection (after one 1 KiB message)
hold-idle-deflate-takeover|--mode hold --conns $HOLD_CONNS --settle 3 --payload json --size 1024 --deflate takeover|kib_per_conn|KiB RSS per idle connection (after one 1 KiB message)
hold-idle-deflate-takeover-45s|--mode hold --conns $HOLD_CONNS --settle 45 --payload json --size 1024 --deflate takeover|kib_per_conn|KiB RSS per idle connection, 45 s after one 1 KiB message
"
SCENARIOS=${SCENARIOS:-$(echo "$ALL_SCENARIOS" | cut -d'|' -f1 | xargs)}

# The client benchmark's echo server: uWebSockets when present, else Switchboard (callbacks).
if [ -n "$uwsdir" ]; then client_echo=uws; client_echo_desc="uWebSockets"
else client_echo=switchboard; client_echo_desc="Switchboard (callbacks)"; fi
# name | client arguments | reported field | unit
CLIENT_ALL_SCENARIOS="
client-pipelined-60B-w64|--mode pipelined --size 60 --window 64|lines_per_s|lines/s echoed by $client_echo_desc
client-reply-60B-w64|--mode reply --size 60 --window 64|lines_per_s|lines/s answered one by one from the receiving loop, echoed by $client_echo_desc
client-reply-60B-w64-p99|(from client-reply-60B-w64)|p99_us|µs round trip p99 in that loop (lower is better)
client-reply-60B-w64-main|--mode reply --size 60 --window 64 --main-actor|lines_per_s|lines/s, the same loop on the main actor (top-level code)
client-reply-60B-w64-seq-main|--mode reply --size 60 --window 64 --main-actor --lines sequence|lines_per_s|lines/s, the same on the main actor over SocketLines (connectLines)
client-stream-60B|--mode stream|lines_per_s|lines/s received from line-streamer
client-stream-60B-seq|--mode stream --lines sequence|lines_per_s|lines/s received from line-streamer over SocketLines (connectLines)
"
CLIENT_SCENARIOS=${CLIENT_SCENARIOS:-$(echo "$CLIENT_ALL_SCENARIOS" | grep -v '|(from ' | cut -d'|' -f1 | xargs)}

# Which servers take part in which scenario (the others show "—" in the table).
supports() {  # server scenario
    case "$2" in
        fanout-redis-*) return 1 ;;  # its own section and table, after the server rounds
        fanout-*) case "$1" in switchboard|switchboard-tasks|switchboard-uring|switchboard-tasks-uring|base|base-tasks|uws) return 0 ;; *) return 1 ;; esac ;;  # others: echo only
        tls-*) case "$1" in switchboard|switchboard-tasks|switchboard-uring|switchboard-tasks-uring|base|base-tasks|python) return 0 ;; *) return 1 ;; esac ;;  # NIO peers: no swift-nio-ssl; uws: built without TLS
        *-deflate-*) case "$1" in switchboard|switchboard-tasks|switchboard-uring|switchboard-tasks-uring|base|base-tasks|uws|python) return 0 ;; *) return 1 ;; esac ;;  # NIO peers: no permessage-deflate
        *) return 0 ;;
    esac
}

# permessage-deflate mode a scenario needs from the server: shared, takeover, or none.
deflate_variant() {  # scenario
    case "$1" in
        *-deflate-shared*) echo shared ;;
        *-deflate-takeover*) echo takeover ;;
        *) echo "" ;;
    esac
}

# ---- prerequisites and builds ----
ensure_build_deps
[ -f /usr/include/zlib.h ] || { say "installing zlib1g-dev (loadgen's permessage-deflate)"; apt_install zlib1g-dev; }
ensure_python_websockets
[[ " $SCENARIOS " == *" fanout-redis-"* ]] && ensure_redis
command -v taskset >/dev/null 2>&1 || apt_install util-linux
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" -lt $((HOLD_CONNS + 100)) ]; then
    say "open-file limit $(ulimit -n) is below $((HOLD_CONNS + 100)); hold-idle may fail"
fi
# Node.js and its ws module, for the client benchmark's node-client.
node_ws_ok() {
    command -v node >/dev/null 2>&1 \
        && node -e 'try { require("ws") } catch (e) { require("/usr/share/nodejs/ws") }' >/dev/null 2>&1
}
if [ "$CLIENTS" != 0 ] && [[ " $CLIENT_LIST " == *" node-client "* ]] && ! node_ws_ok; then
    missing=()
    command -v node >/dev/null 2>&1 || missing+=(nodejs)
    missing+=(node-ws)
    say "installing ${missing[*]} (Node's ws, for the client benchmark)"
    ( apt_install "${missing[@]}" ) || true   # a subshell: apt_install exits when it cannot install
    if ! node_ws_ok; then
        say "Node.js with the ws module is unavailable: skipping node-client"
        CLIENT_LIST=$(echo "$CLIENT_LIST" | tr ' ' '\n' | grep -vx node-client | xargs || true)
    fi
fi

started=$(date +%s)
if [ -n "${SWITCHBOARD_BIN:-}" ]; then
    sbbin="$(cd "$SWITCHBOARD_BIN" && pwd)"
    say "using the echo-server in $sbbin"
else
    say "building Switchboard's echo-server (release)"
    swift build -c release --package-path "$root" --product echo-server 2>&1 | tail -1
    sbbin="$root/.build/release"
fi
# Before/after: BASE_BIN names a folder with another build's release echo-server (say, the
# previous commit's); servers "base" and "base-tasks" run it, interleaved with the others.
basebin=""
if [ -n "${BASE_BIN:-}" ]; then
    basebin="$(cd "$BASE_BIN" && pwd)"
    say "baseline echo-server: $basebin"
    # Added after switchboard-tasks unless SERVERS names them already.
    case " $SERVERS " in
        *" base "*|*" base-tasks "*) ;;
        *) SERVERS=${SERVERS/switchboard-tasks/switchboard-tasks base base-tasks} ;;
    esac
fi
say "building the load generator, peers and micro benchmarks (release)"
swift build -c release 2>&1 | tail -1
bin="$here/.build/release"
say "builds took $(( $(date +%s) - started )) s"

mkdir -p "$OUT"
results="$OUT/results.tsv"
: > "$results"
wire="$OUT/wire.tsv"   # server scenario round conns negotiated payload_sent wire_sent payload_recv wire_recv
: > "$wire"
redis_results="$OUT/redis.tsv"   # server setup round window deliveries_per_s lat_p50_us lat_p99_us lost
: > "$redis_results"
certdir="$OUT/tls"
mkdir -p "$certdir"
if [ ! -f "$certdir/key.pem" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
        -keyout "$certdir/key.pem" -out "$certdir/cert.pem" >/dev/null 2>&1
fi

# uWebSockets cannot listen on port 0 (and its listeners set SO_REUSEPORT, so a taken port does
# not fail): take the next port from 19000 up that nothing listens on.
next_port=19000
port_in_use() {
    if command -v ss >/dev/null 2>&1; then
        [ -n "$(ss -Htln "sport = :$1" 2>/dev/null)" ]
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
    fi
}
pick_port() {  # sets picked_port
    for _ in $(seq 1 1000); do
        picked_port=$next_port
        next_port=$(( next_port >= 19999 ? 19000 : next_port + 1 ))
        port_in_use "$picked_port" || return 0
    done
    say "no free port in 19000-19999"; exit 1
}

server_pid=""
server_port=""
picked_port=""
start_server() {  # name tls(0|1) [variant: fanout (uws runs uws-fanout), shared, takeover (compression)]
    local name=$1 tls=$2 variant=${3:-} log="$OUT/server-$1${3:+-$3}.log" tlsargs=() sbargs=() pyargs=()
    [ "$tls" = 1 ] && tlsargs=(--tls-cert "$certdir/cert.pem" --tls-key "$certdir/key.pem")
    # Compression: echo-server accepts it by default (shared per-loop streams, no context
    # takeover); --context-takeover gives each connection its own streams.
    [ "$variant" = takeover ] && sbargs=(--context-takeover)
    case "$variant" in shared|takeover) pyargs=(--deflate) ;; esac
    local uwscomp=off
    case "$variant" in shared) uwscomp=shared ;; takeover) uwscomp=dedicated ;; esac
    server_port=""
    case "$name" in
        uws)
            pick_port
            local uwsbin=uws-echo
            [ "$variant" = fanout ] && uwsbin=uws-fanout
            UWS_COMPRESSION=$uwscomp PORT=$picked_port taskset -c 0 "$uwsdir/$uwsbin" >"$log" 2>&1 & ;;
        switchboard) taskset -c 0 "$sbbin/echo-server" --port 0 --loops 1 --api callbacks "${tlsargs[@]}" "${sbargs[@]}" >"$log" 2>&1 & ;;
        switchboard-tasks) taskset -c 0 "$sbbin/echo-server" --port 0 --loops 1 --api tasks "${tlsargs[@]}" "${sbargs[@]}" >"$log" 2>&1 & ;;
        switchboard-uring) SWITCHBOARD_EVENT_LOOP=io_uring taskset -c 0 "$sbbin/echo-server" --port 0 --loops 1 --api callbacks "${tlsargs[@]}" "${sbargs[@]}" >"$log" 2>&1 & ;;
        switchboard-tasks-uring) SWITCHBOARD_EVENT_LOOP=io_uring taskset -c 0 "$sbbin/echo-server" --port 0 --loops 1 --api tasks "${tlsargs[@]}" "${sbargs[@]}" >"$log" 2>&1 & ;;
        base) taskset -c 0 "$basebin/echo-server" --port 0 --loops 1 --api callbacks "${tlsargs[@]}" "${sbargs[@]}" >"$log" 2>&1 & ;;
        base-tasks) taskset -c 0 "$basebin/echo-server" --port 0 --loops 1 --api tasks "${tlsargs[@]}" "${sbargs[@]}" >"$log" 2>&1 & ;;
        nio) taskset -c 0 "$bin/nio-echo-server" --port 0 --loops 1 >"$log" 2>&1 & ;;
        hummingbird) taskset -c 0 "$bin/hummingbird-echo-server" --port 0 --loops 1 >"$log" 2>&1 & ;;
        python) taskset -c 0 python3 "$here/Peers/python_echo_server.py" --port 0 "${tlsargs[@]}" "${pyargs[@]}" >"$log" 2>&1 & ;;
        line-streamer) taskset -c 0 "$bin/line-streamer" --port 0 >"$log" 2>&1 & ;;
        *) say "unknown server $name"; exit 2 ;;
    esac
    server_pid=$!
    for _ in $(seq 1 200); do
        if [ "$name" = uws ]; then
            # "uws-echo listening on PORT" / "listening PORT": the port is the one we gave it.
            grep -q listening "$log" && server_port=$picked_port
        else
            server_port=$(sed -n 's/.*listening on wss\{0,1\}:\/\/[^:]*:\([0-9]*\).*/\1/p' "$log" | head -1)
        fi
        [ -n "$server_port" ] && return 0
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.05
    done
    say "$name did not start:"; cat "$log" >&2
    exit 1
}

stop_server() {
    [ -n "$server_pid" ] || return 0
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
}

# ---- fan-out through Redis: a redis-server and several echo-servers at once ----
redis_pid=""
redis_port=""
start_redis() {
    pick_port
    redis_port=$picked_port
    taskset -c 1 redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
        >"$OUT/redis-server.log" 2>&1 &
    redis_pid=$!
    for _ in $(seq 1 100); do
        [ "$(redis-cli -p "$redis_port" ping 2>/dev/null)" = PONG ] && return 0
        kill -0 "$redis_pid" 2>/dev/null || break
        sleep 0.05
    done
    say "redis-server did not start:"; cat "$OUT/redis-server.log" >&2
    exit 1
}
stop_redis() {
    [ -n "$redis_pid" ] || return 0
    kill -TERM "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
    redis_pid=""
}
# A Redis Cluster of three masters (no replicas: the fan-out's one topic lives on one shard, as
# every topic does; replicas would only add their replication traffic), for the same fan-out.
cluster_pids=()
cluster_ports=()
start_redis_cluster() {
    local i port pid nodes=()
    for i in 1 2 3; do
        for _ in $(seq 1 1000); do
            pick_port
            port_in_use $(( picked_port + 10000 )) || break
        done
        port=$picked_port
        # A fresh folder: a nodes.conf left by an earlier run would make the node refuse to
        # join a new cluster.
        rm -rf "$OUT/redis-cluster-$port"
        mkdir -p "$OUT/redis-cluster-$port"
        (cd "$OUT/redis-cluster-$port" && exec taskset -c 1 redis-server --port "$port" --bind 127.0.0.1 --save "" \
            --appendonly no --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
            >"$OUT/redis-cluster-$port.log" 2>&1) &
        pid=$!
        cluster_pids+=("$pid")
        cluster_ports+=("$port")
        nodes+=("127.0.0.1:$port")
        for _ in $(seq 1 100); do
            [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break
            sleep 0.05
        done
    done
    redis-cli --cluster create "${nodes[@]}" --cluster-yes >"$OUT/redis-cluster-create.log" 2>&1 \
        || { say "redis-cli --cluster create failed:"; cat "$OUT/redis-cluster-create.log" >&2; exit 1; }
    for _ in $(seq 1 200); do
        redis-cli -p "${cluster_ports[0]}" cluster info 2>/dev/null | grep -q 'cluster_state:ok' && return 0
        sleep 0.05
    done
    say "the Redis Cluster did not become ready"; exit 1
}
stop_redis_cluster() {
    local pid
    for pid in "${cluster_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${cluster_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    cluster_pids=()
    cluster_ports=()
}

node_pids=()
node_ports=()
start_node() {  # api (callbacks|tasks) [redis URL]
    local log="$OUT/redis-node-$(( ${#node_pids[@]} + 1 )).log" redisargs=() port="" pid
    [ -n "${2:-}" ] && redisargs=(--redis "$2")
    taskset -c 0 "$sbbin/echo-server" --port 0 --loops 1 --api "$1" "${redisargs[@]}" >"$log" 2>&1 &
    pid=$!
    node_pids+=("$pid")
    for _ in $(seq 1 200); do
        port=$(sed -n 's/.*listening on ws:\/\/[^:]*:\([0-9]*\).*/\1/p' "$log" | head -1)
        [ -n "$port" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    [ -n "$port" ] || { say "echo-server --api $1 ${2:+--redis $2} did not start:"; cat "$log" >&2; exit 1; }
    node_ports+=("$port")
}
stop_nodes() {
    local pid
    for pid in "${node_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${node_pids[@]}"; do
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    node_pids=()
    node_ports=()
}
cleanup() { stop_server; stop_nodes; stop_redis_cluster; stop_redis; }
trap cleanup EXIT

measure() {  # server scenario-line round
    local server=$1 line=$2 round=$3
    local name args field
    name=$(echo "$line" | cut -d'|' -f1)
    args=$(echo "$line" | cut -d'|' -f2)
    field=$(echo "$line" | cut -d'|' -f3)
    local extra=()
    case "$name" in
        hold-*) extra=(--pid "$server_pid") ;;
        # The server's CPU over the window (the generator may be what limits the cycles/s).
        churn-*|tls-churn-*) extra=(--pid "$server_pid" --duration "$DURATION" --warmup "$WARMUP") ;;
        *) extra=(--duration "$DURATION" --warmup "$WARMUP") ;;
    esac
    local out value
    # shellcheck disable=SC2086
    out=$(taskset -c 1 "$bin/loadgen" --port "$server_port" $args "${extra[@]}" 2>&1) || true
    value=$(echo "$out" | sed -n "s/.* $field=\([0-9.]*\).*/\1/p" | head -1)
    if [ -z "$value" ] || echo "$out" | grep -q "errors=[1-9]\|failed=[1-9]\|mismatches=[1-9]"; then
        say "$server $name round $round: FAILED: $(echo "$out" | tail -2 | tr '\n' ' ')"
        value="failed"
    elif [[ "$args" == *--deflate* ]] && echo "$out" | grep -q "declined=[1-9]"; then
        say "$server $name round $round: FAILED: the server declined permessage-deflate: $(echo "$out" | tail -1)"
        value="failed"
    fi
    printf '%s\t%s\t%s\t%s\n' "$server" "$name" "$round" "$value" >> "$results"
    # Bytes on the wire, for the JSON and compressed scenarios.
    if [ "$value" != failed ] && [[ "$args" == *--payload\ json* || "$args" == *--deflate* ]]; then
        local f row=("$server" "$name" "$round")
        for f in conns negotiated payload_sent wire_sent payload_recv wire_recv; do
            row+=("$(echo "$out" | sed -n "s/^result .* $f=\([0-9]*\).*/\1/p" | head -1)")
        done
        (IFS=$'\t'; echo "${row[*]}") >> "$wire"
    fi
    printf '  %-17s %-26s round %s: %s %s %s\n' "$server" "$name" "$round" "$value" \
        "$(echo "$out" | grep -o 'loadgen_cpu=[0-9]*%' || true)" \
        "$(echo "$out" | grep -o 'negotiated=[0-9]* \|saved_pct=[-0-9.]*\|server_rss_kib=[0-9]*' | tr -d '\n' || true)" >&2
}

scenario_line() { echo "$ALL_SCENARIOS" | grep "^$1|"; }

# One server process (tls 0|1, variant as start_server's) for the given scenarios, if any.
measure_group() {  # server tls variant round scenario...
    local server=$1 tls=$2 variant=$3 round=$4 s
    shift 4
    [ $# -gt 0 ] || return 0
    start_server "$server" "$tls" $variant
    for s in "$@"; do measure "$server" "$(scenario_line "$s")" "$round"; done
    stop_server
}
client_scenario_line() { echo "$CLIENT_ALL_SCENARIOS" | grep "^$1|"; }

measure_client() {  # client scenario-line round
    local client=$1 line=$2 round=$3
    local name args field cmd=()
    name=$(echo "$line" | cut -d'|' -f1)
    args=$(echo "$line" | cut -d'|' -f2)
    field=$(echo "$line" | cut -d'|' -f3)
    case "$client" in
        sb-client) cmd=("$bin/client-bench") ;;
        python-client) cmd=(python3 "$here/Peers/python_client_bench.py") ;;
        node-client) cmd=(node "$here/Peers/node_client_bench.js") ;;
        *) say "unknown client $client"; exit 2 ;;
    esac
    local out value
    # shellcheck disable=SC2086
    out=$(timeout 120 taskset -c 1 "${cmd[@]}" --port "$server_port" $args \
        --duration "$DURATION" --warmup "$WARMUP" 2>&1) || true
    value=$(echo "$out" | sed -n "s/^result .* $field=\([0-9.]*\).*/\1/p" | head -1)
    if [ -z "$value" ]; then
        say "$client $name round $round: FAILED: $(echo "$out" | tail -2 | tr '\n' ' ')"
        value="failed"
    fi
    printf '%s\t%s\t%s\t%s\n' "$client" "$name" "$round" "$value" >> "$results"
    # The reply loop's round-trip p99, as its own row.
    local p99
    p99=$(echo "$out" | sed -n 's/^result .* p99_us=\([0-9.]*\).*/\1/p' | head -1)
    [ -n "$p99" ] && printf '%s\t%s\t%s\t%s\n' "$client" "$name-p99" "$round" "$p99" >> "$results"
    printf '  %-17s %-26s round %s: %s %s %s\n' "$client" "$name" "$round" "$value" \
        "$(echo "$out" | grep -o 'cpu=[0-9]*%' || true)" "${p99:+p99=${p99}µs}" >&2
}

for round in $(seq 1 "$RUNS"); do
    say "round $round of $RUNS"
    for server in $SERVERS; do
        plain=(); tls=(); hold=(); fanout=(); dshared=(); dtakeover=()
        for s in $SCENARIOS; do
            supports "$server" "$s" || continue
            case "$s" in
                tls-*) tls+=("$s") ;;
                hold-*) hold+=("$s") ;;
                *-deflate-shared*) dshared+=("$s") ;;
                *-deflate-takeover*) dtakeover+=("$s") ;;
                # uWebSockets relays in a separate program; Switchboard's echo-server has /broadcast.
                fanout-*) if [ "$server" = uws ]; then fanout+=("$s"); else plain+=("$s"); fi ;;
                *) plain+=("$s") ;;
            esac
        done
        measure_group "$server" 0 "" "$round" "${plain[@]}"
        measure_group "$server" 0 fanout "$round" "${fanout[@]}"
        measure_group "$server" 1 "" "$round" "${tls[@]}"
        # Compression on, in the mode the scenarios ask for.
        measure_group "$server" 0 shared "$round" "${dshared[@]}"
        measure_group "$server" 0 takeover "$round" "${dtakeover[@]}"
        # Memory on a fresh process, so earlier scenarios' heap does not hide the growth.
        for s in "${hold[@]}"; do
            start_server "$server" 0 "$(deflate_variant "$s")"
            sleep 0.5
            measure "$server" "$(scenario_line "$s")" "$round"
            stop_server
        done
    done
done

# ---- fan-out across processes through Redis (its own table) ----
measure_redis() {  # server setup round
    local server=$1 setup=$2 round=$3 args w out f value fields ports=(--port "${node_ports[0]}")
    [ "${#node_ports[@]}" -gt 1 ] && ports+=(--port2 "${node_ports[1]}")
    args=$(scenario_line fanout-redis-16B-1000subs | cut -d'|' -f2)
    for w in 4 1; do
        # shellcheck disable=SC2086
        out=$(taskset -c 1 "$bin/loadgen" "${ports[@]}" $args --window "$w" \
            --duration "$DURATION" --warmup "$WARMUP" 2>&1) || true
        fields=()
        for f in deliveries_per_s lat_p50_us lat_p99_us lost; do
            fields+=("$(echo "$out" | sed -n "s/^result .* $f=\([0-9.]*\).*/\1/p" | head -1)")
        done
        if [ -z "${fields[0]}" ] || [ -z "${fields[3]}" ] || echo "$out" | grep -q "errors=[1-9]\|failed=[1-9]"; then
            say "$server $setup window $w round $round: FAILED: $(echo "$out" | tail -2 | tr '\n' ' ')"
            fields=(failed failed failed failed)
        fi
        (IFS=$'\t'; echo "$server"$'\t'"$setup"$'\t'"$round"$'\t'"$w"$'\t'"${fields[*]}") >> "$redis_results"
        printf '  %-17s %-20s window %s round %s: %s deliveries/s, p50 %s us, p99 %s us, lost %s %s\n' \
            "$server" "$setup" "$w" "$round" "${fields[@]}" "$(echo "$out" | grep -o 'loadgen_cpu=[0-9]*%' || true)" >&2
    done
}

redis_servers=$(echo "$SERVERS" | tr ' ' '\n' | grep -x 'switchboard\|switchboard-tasks' | xargs || true)
if [[ " $SCENARIOS " == *" fanout-redis-16B-1000subs "* ]] && [ -n "$redis_servers" ]; then
    start_redis
    redis_url="redis://127.0.0.1:$redis_port"
    say "fan-out through Redis: redis-server on port $redis_port"
    start_redis_cluster
    cluster_url="redis-cluster://$(printf '127.0.0.1:%s,' "${cluster_ports[@]}" | sed 's/,$//')"
    say "fan-out through a Redis Cluster: $cluster_url"
    for round in $(seq 1 "$RUNS"); do
        say "fan-out through Redis: round $round of $RUNS"
        for server in $redis_servers; do
            api=callbacks
            [ "$server" = switchboard-tasks ] && api=tasks
            start_node "$api"
            measure_redis "$server" "1 process" "$round"
            stop_nodes
            start_node "$api" "$redis_url"
            measure_redis "$server" "1 process + Redis" "$round"
            stop_nodes
            start_node "$api" "$redis_url"
            start_node "$api" "$redis_url"
            measure_redis "$server" "2 processes + Redis" "$round"
            stop_nodes
            start_node "$api" "$cluster_url"
            start_node "$api" "$cluster_url"
            measure_redis "$server" "2 processes + Redis Cluster" "$round"
            stop_nodes
        done
    done
    stop_redis_cluster
    stop_redis
fi

# ---- clients: Switchboard's client against Python websockets and Node ws ----
if [ "$CLIENTS" != 0 ] && [ -n "$CLIENT_LIST" ]; then
    for round in $(seq 1 "$RUNS"); do
        say "clients: round $round of $RUNS"
        for s in $CLIENT_SCENARIOS; do
            case "$s" in
                client-pipelined-*|client-reply-*) start_server "$client_echo" 0 ;;
                client-stream-*) start_server line-streamer 0 ;;
                *) say "unknown client scenario $s"; exit 2 ;;
            esac
            for client in $CLIENT_LIST; do
                # --main-actor and --lines are Switchboard's: the peers have no such thing.
                case "$(client_scenario_line "$s" | cut -d'|' -f2)" in
                    *--main-actor*|*--lines*) [ "$client" = sb-client ] || continue ;;
                esac
                measure_client "$client" "$(client_scenario_line "$s")" "$round"
            done
            stop_server
        done
    done
fi

if [ -n "${MICRO:-}" ]; then
    say "micro benchmarks"
    taskset -c 0 "$bin/micro" ${QUICK:+--quick} | tee "$OUT/micro.md"
fi

if [ -n "${MICRO:-}" ]; then
    say "topic replay buffer memory (replay-memory)"
    { "$bin/replay-memory" 1000 100; "$bin/replay-memory" 1000 1000; "$bin/replay-memory" 100 16384; } | tee "$OUT/replay-memory.txt"
fi

say "total $(( $(date +%s) - started )) s; raw results in $results"
if [ "$CLIENTS" != 0 ] && [ -n "$CLIENT_LIST" ]; then
    python3 "$here/table.py" "$results" "$SERVERS" "$ALL_SCENARIOS" "$CLIENT_LIST" "$CLIENT_ALL_SCENARIOS" | tee "$OUT/table.md"
else
    python3 "$here/table.py" "$results" "$SERVERS" "$ALL_SCENARIOS" | tee "$OUT/table.md"
fi
