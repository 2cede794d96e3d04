#!/usr/bin/env bash
# Switchboard against its peers, side by side, in one run; prints one Markdown table.
#
#   Benchmarks/run.sh              # everything: ~12 min on a fresh clone of a 2-core machine
#   QUICK=1 Benchmarks/run.sh      # one short round, to check the set-up (~3 min once built)
#
# Builds in release: Switchboard's echo-server, and from this package the load generator,
# a raw SwiftNIO echo server, a Hummingbird 2 echo server (and the micro benchmarks, run with
# MICRO=1). Python websockets is the fourth peer. Each server runs with one event loop, pinned to
# CPU 0; the load generator runs on CPU 1. Every server × scenario is measured RUNS times (3),
# in rounds that interleave the servers; the table shows the median and min–max, then the
# ratio Switchboard / peer of the medians.
#
# Servers: "switchboard" is echo-server with callback routes (WebSocketCallbacks: no task per
# connection), "switchboard-tasks" the same server with a task per connection iterating
# messages(); "nio" a raw SwiftNIO NIOWebSocket handler; "hummingbird" Hummingbird 2's
# WebSocket router; "python" websockets 17 (asyncio).
#
# Settings (environment): RUNS=3 DURATION=1.5 (s measured) WARMUP=0.3 (s) HOLD_CONNS=10000
# SERVERS="switchboard switchboard-tasks nio hummingbird python" SCENARIOS="<names below>"
# OUT=<results dir> SWITCHBOARD_BIN=<folder with a release echo-server, e.g. another checkout's
# .build/release, for before/after comparisons; default: this checkout's, built here>
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$here"
. "$root/scripts/lib/deps.sh"

RUNS=${RUNS:-3}
DURATION=${DURATION:-1.5}
WARMUP=${WARMUP:-0.3}
HOLD_CONNS=${HOLD_CONNS:-10000}
SERVERS=${SERVERS:-"switchboard switchboard-tasks nio hummingbird python"}
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
tls-echo-text-16B-100c|--tls --conns 100 --size 16|round_trips_per_s|round trips/s
hold-idle|--mode hold --conns $HOLD_CONNS --settle 3|kib_per_conn|KiB RSS per idle connection
"
SCENARIOS=${SCENARIOS:-$(echo "$ALL_SCENARIOS" | cut -d'|' -f1 | xargs)}

# Which servers take part in which scenario (the others show "—" in the table).
supports() {  # server scenario
    case "$2" in
        fanout-*) case "$1" in switchboard*) return 0 ;; *) return 1 ;; esac ;;  # peers: echo only
        tls-*) [ "$1" = switchboard ] || [ "$1" = switchboard-tasks ] || [ "$1" = python ] ;;  # NIO peers: no swift-nio-ssl
        *) return 0 ;;
    esac
}

# ---- prerequisites and builds ----
ensure_build_deps
ensure_python_websockets
command -v taskset >/dev/null 2>&1 || apt_install util-linux
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" -lt $((HOLD_CONNS + 100)) ]; then
    say "open-file limit $(ulimit -n) is below $((HOLD_CONNS + 100)); hold-idle may fail"
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
say "building the load generator, peers and micro benchmarks (release)"
swift build -c release 2>&1 | tail -1
bin="$here/.build/release"
say "builds took $(( $(date +%s) - started )) s"

mkdir -p "$OUT"
results="$OUT/results.tsv"
: > "$results"
certdir="$OUT/tls"
mkdir -p "$certdir"
if [ ! -f "$certdir/key.pem" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
        -keyout "$certdir/key.pem" -out "$certdir/cert.pem" >/dev/null 2>&1
fi

server_pid=""
server_port=""
start_server() {  # name tls(0|1)
    local name=$1 tls=$2 log="$OUT/server-$1.log" tlsargs=()
    [ "$tls" = 1 ] && tlsargs=(--tls-cert "$certdir/cert.pem" --tls-key "$certdir/key.pem")
    case "$name" in
        switchboard) taskset -c 0 "$sbbin/echo-server" --port 0 --loops 1 --api callbacks "${tlsargs[@]}" >"$log" 2>&1 & ;;
        switchboard-tasks) taskset -c 0 "$sbbin/echo-server" --port 0 --loops 1 --api tasks "${tlsargs[@]}" >"$log" 2>&1 & ;;
        nio) taskset -c 0 "$bin/nio-echo-server" --port 0 --loops 1 >"$log" 2>&1 & ;;
        hummingbird) taskset -c 0 "$bin/hummingbird-echo-server" --port 0 --loops 1 >"$log" 2>&1 & ;;
        python) taskset -c 0 python3 "$here/Peers/python_echo_server.py" --port 0 "${tlsargs[@]}" >"$log" 2>&1 & ;;
        *) say "unknown server $name"; exit 2 ;;
    esac
    server_pid=$!
    for _ in $(seq 1 200); do
        server_port=$(sed -n 's/.*listening on wss\{0,1\}:\/\/[^:]*:\([0-9]*\).*/\1/p' "$log" | head -1)
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
trap stop_server EXIT

measure() {  # server scenario-line round
    local server=$1 line=$2 round=$3
    local name args field
    name=$(echo "$line" | cut -d'|' -f1)
    args=$(echo "$line" | cut -d'|' -f2)
    field=$(echo "$line" | cut -d'|' -f3)
    local extra=()
    case "$name" in hold-*) extra=(--pid "$server_pid") ;; *) extra=(--duration "$DURATION" --warmup "$WARMUP") ;; esac
    local out value
    # shellcheck disable=SC2086
    out=$(taskset -c 1 "$bin/loadgen" --port "$server_port" $args "${extra[@]}" 2>&1) || true
    value=$(echo "$out" | sed -n "s/.* $field=\([0-9.]*\).*/\1/p" | head -1)
    if [ -z "$value" ] || echo "$out" | grep -q "errors=[1-9]\|failed=[1-9]"; then
        say "$server $name round $round: FAILED: $(echo "$out" | tail -2 | tr '\n' ' ')"
        value="failed"
    fi
    printf '%s\t%s\t%s\t%s\n' "$server" "$name" "$round" "$value" >> "$results"
    printf '  %-12s %-26s round %s: %s %s\n' "$server" "$name" "$round" "$value" \
        "$(echo "$out" | grep -o 'loadgen_cpu=[0-9]*%' || true)" >&2
}

scenario_line() { echo "$ALL_SCENARIOS" | grep "^$1|"; }

for round in $(seq 1 "$RUNS"); do
    say "round $round of $RUNS"
    for server in $SERVERS; do
        plain=(); tls=(); hold=()
        for s in $SCENARIOS; do
            supports "$server" "$s" || continue
            case "$s" in tls-*) tls+=("$s") ;; hold-*) hold+=("$s") ;; *) plain+=("$s") ;; esac
        done
        if [ ${#plain[@]} -gt 0 ]; then
            start_server "$server" 0
            for s in "${plain[@]}"; do measure "$server" "$(scenario_line "$s")" "$round"; done
            stop_server
        fi
        if [ ${#tls[@]} -gt 0 ]; then
            start_server "$server" 1
            for s in "${tls[@]}"; do measure "$server" "$(scenario_line "$s")" "$round"; done
            stop_server
        fi
        # Memory on a fresh process, so earlier scenarios' heap does not hide the growth.
        for s in "${hold[@]}"; do
            start_server "$server" 0
            sleep 0.5
            measure "$server" "$(scenario_line "$s")" "$round"
            stop_server
        done
    done
done

if [ -n "${MICRO:-}" ]; then
    say "micro benchmarks"
    taskset -c 0 "$bin/micro" ${QUICK:+--quick} | tee "$OUT/micro.md"
fi

say "total $(( $(date +%s) - started )) s; raw results in $results"
python3 "$here/table.py" "$results" "$SERVERS" "$ALL_SCENARIOS" | tee "$OUT/table.md"
