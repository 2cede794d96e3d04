#!/usr/bin/env bash
# Instructions per message and per connection cycle: a regression guard that a noisy machine
# cannot fool (instruction counts do not depend on the machine's load or the CPU's frequency,
# unlike rates). Counted by the CPU's own counter (`perf stat -e instructions:u,instructions:k`,
# Debian's linux-perf), user space (the guard) and kernel (system calls, for information).
#
# Why not valgrind's callgrind: Debian bookworm's valgrind 3.19 dies on every program that
# starts Swift's concurrency runtime ("VALGRIND INTERNAL ERROR: Valgrind received a signal 11",
# even with --tool=none; a plain `print("hi")` runs), so it cannot run echo-server or
# client-bench here. The hardware counter measures the same thing, natively.
#
# Paths measured (release builds; the measured program runs under `perf stat`, its driver
# beside it):
#   echo-callbacks   echo-server --api callbacks: instructions per echoed message (loadgen --mode
#                    echo, 16-byte text messages, 100 connections, one message in flight each)
#   echo-tasks       the same with --api tasks
#   churn-callbacks  echo-server --api callbacks: instructions per connection cycle (loadgen --mode
#                    churn: connect, upgrade, one 16-byte echo, close handshake; 50 at a time)
#   churn-tasks      the same with --api tasks
#   echo-uws, churn-uws  the echo and churn paths against uWebSockets' uws-echo (UWS_DIR), for
#                    comparison (not in the default set)
#   reply-loop       client-bench --mode reply (60-byte lines, 64 in flight, each answered from
#                    the receiving loop) against uws-echo when found (else echo-server):
#                    instructions of the client per line
#
# COUNT=allocations counts calls to libc's malloc instead (a uprobe: `perf probe -x <libc> malloc`,
# set up here, which needs root): the guard on a machine without hardware counters (a VM without
# a PMU, where perf prints "<not supported>" for instructions), and the figure an allocation
# change moves. Every Swift object, closure context and array growth is one call.
# COUNT=syscalls counts system calls instead (the `raw_syscalls:sys_enter` tracepoint, every
# thread of the measured program; needs root or perf_event_paranoid ≤ 1): what an event-loop
# backend changes (issue 38). Like the others, it does not depend on the machine's load.
#
# EVENT_LOOP=epoll|io_uring runs the servers on that backend (SWITCHBOARD_EVENT_LOOP; default
# the library's automatic choice, epoll); the client path (reply-loop) ignores it.
#
# Each path runs twice, for DURATION_A and DURATION_B seconds; the figure is the slope
#   (instructions_B − instructions_A) / (units_B − units_A),
# so start-up, connection set-up and shutdown cancel out. The driver counts the units (messages,
# cycles, lines) in its measured window, which here is the whole run (--warmup 0). Servers on
# CPU 0, drivers on CPU 1, as in run.sh.
#
# Usage: [COUNT=instructions|allocations|syscalls] [EVENT_LOOP=epoll|io_uring] Benchmarks/instructions.sh [path ...]   (default: all)
# Settings (environment): SWITCHBOARD_BIN=<folder with a release echo-server> (default: this
# checkout's .build/release, built here), CLIENT_BIN=<folder with a release client-bench>
# (default: this package's, built here), DURATION_A=2 DURATION_B=6, UWS_DIR (default
# ../shared/peers beside this repository), OUT=<folder for perf's files> (default a temporary
# one). Prints a Markdown table; the figures are in docs/performance.md.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
say() { echo "instructions.sh: $*" >&2; }

command -v perf >/dev/null 2>&1 || { say "perf is missing (apt-get install linux-perf)"; exit 1; }
COUNT=${COUNT:-instructions}
case "$COUNT" in
    instructions)
        events=instructions:u,instructions:k
        # perf may run yet report "<not supported>" (a virtual machine without a PMU): a count must be a number.
        perf stat -x, -e instructions:u true 2>&1 | grep -q '^[0-9][0-9]*,' ||
            { say "perf cannot count instructions on this machine (no hardware counters: a VM without a PMU, or perf_event_paranoid); COUNT=allocations works without them"; exit 1; } ;;
    allocations)
        events=probe_libc:malloc
        libc=$(ldconfig -p | awk '/libc\.so\.6 .*x86-64|libc\.so\.6 .*AArch64/ {print $NF; exit}')
        [ -n "$libc" ] || libc=$(ldconfig -p | awk '/libc\.so\.6/ {print $NF; exit}')
        perf stat -x, -e probe_libc:malloc true >/dev/null 2>&1 || perf probe -q -x "$libc" malloc >/dev/null 2>&1 ||
            { say "cannot set a uprobe on malloc in $libc (needs root and uprobes)"; exit 1; }
        perf stat -x, -e probe_libc:malloc true 2>&1 | grep -q '^[0-9][0-9]*,' ||
            { say "the malloc uprobe counts nothing here"; exit 1; } ;;
    syscalls)
        events=raw_syscalls:sys_enter
        perf stat -x, -e raw_syscalls:sys_enter true 2>&1 | grep -q '^[0-9][0-9]*,' ||
            { say "perf cannot count system calls here (needs root or perf_event_paranoid <= 1, and tracefs)"; exit 1; } ;;
    *) say "COUNT is instructions, allocations or syscalls, not $COUNT"; exit 2 ;;
esac
case "${EVENT_LOOP:-}" in
    ""|epoll|io_uring) ;;
    *) say "EVENT_LOOP is epoll or io_uring, not $EVENT_LOOP"; exit 2 ;;
esac
[ -z "${EVENT_LOOP:-}" ] || export SWITCHBOARD_EVENT_LOOP="$EVENT_LOOP"
DURATION_A=${DURATION_A:-2}
DURATION_B=${DURATION_B:-6}
OUT=${OUT:-$(mktemp -d /tmp/switchboard-instructions.XXXXXX)}
mkdir -p "$OUT"
paths=("$@")
[ ${#paths[@]} -gt 0 ] || paths=(echo-callbacks echo-tasks churn-callbacks churn-tasks reply-loop)

if [ -n "${SWITCHBOARD_BIN:-}" ]; then
    sbbin="$(cd "$SWITCHBOARD_BIN" && pwd)"
else
    say "building echo-server (release)"
    swift build -c release --package-path "$root" --product echo-server 2>&1 | tail -1
    sbbin="$root/.build/release"
fi
say "building loadgen and client-bench (release)"
swift build -c release --package-path "$here" --product loadgen 2>&1 | tail -1
bin="$here/.build/release"
if [ -n "${CLIENT_BIN:-}" ]; then
    clientbin="$(cd "$CLIENT_BIN" && pwd)"
else
    swift build -c release --package-path "$here" --product client-bench 2>&1 | tail -1
    clientbin="$bin"
fi
uwsdir="${UWS_DIR:-$root/../shared/peers}"

pid=""
port=""
cleanup() { [ -z "$pid" ] || kill -KILL "$pid" 2>/dev/null || true; }
trap cleanup EXIT

# Starts echo-server (api; "uws": uWebSockets' uws-echo, for comparison) under perf stat (counts to out-file), or without it when $3 is
# "native"; sets pid (perf's, or the server's) and port.
start_echo_server() {  # api out-file [native]
    local log="$OUT/server.log"
    : > "$log"
    if [ "$1" = uws ]; then
        [ -x "$uwsdir/uws-echo" ] || { say "uws-echo not found in $uwsdir (UWS_DIR)"; exit 1; }
        port=19951
        PORT=$port taskset -c 0 perf stat -x, -e "$events" -o "$2" "$uwsdir/uws-echo" > "$log" 2>&1 &
        pid=$!
        for _ in $(seq 1 100); do grep -q listening "$log" && return 0; sleep 0.05; done
        say "uws-echo did not start:"; cat "$log" >&2; exit 1
    fi
    if [ "${3:-}" = native ]; then
        taskset -c 0 "$sbbin/echo-server" --port 0 --loops 1 --api "$1" > "$log" 2>&1 &
    else
        taskset -c 0 perf stat -x, -e "$events" -o "$2" \
            "$sbbin/echo-server" --port 0 --loops 1 --api "$1" > "$log" 2>&1 &
    fi
    pid=$!
    port=""
    for _ in $(seq 1 600); do
        port=$(sed -n 's/.*listening on ws:\/\/[^:]*:\([0-9]*\).*/\1/p' "$log" | head -1)
        [ -n "$port" ] && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    say "echo-server did not start:"; cat "$log" >&2; exit 1
}

# Stops the server: SIGTERM to echo-server itself (perf stat then writes its counts and exits).
stop_server() {
    pkill -TERM -P "$pid" echo-server 2>/dev/null || pkill -TERM -P "$pid" uws-echo 2>/dev/null ||
        kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=""
}

# "user kernel" counts from a perf stat -x, file (allocations, syscalls: "calls 0").
instructions() {
    local u k
    if [ "$COUNT" != instructions ]; then
        u=$(awk -F, -v e="$events" '$3 ~ "^" e {print $1}' "$1")
        echo "${u:-0} 0"
        return
    fi
    u=$(awk -F, '$3 ~ /^instructions:u/ {print $1}' "$1")
    k=$(awk -F, '$3 ~ /^instructions:k/ {print $1}' "$1")
    echo "${u:-0} ${k:-0}"
}

field() {  # output name
    echo "$1" | sed -n "s/^result .* $2=\([0-9.]*\).*/\1/p" | head -1
}

# One run of a server path: instructions and units.
run_server_path() {  # api mode duration → "user kernel units"
    local api=$1 mode=$2 duration=$3 file="$OUT/$1-$2-$3.out" out args units
    start_echo_server "$api" "$file"
    case "$mode" in
        echo) args=(--mode echo --conns 100 --size 16 --window 1) ;;
        churn) args=(--mode churn --conns 50 --size 16) ;;
    esac
    out=$(taskset -c 1 "$bin/loadgen" --port "$port" "${args[@]}" --duration "$duration" --warmup 0 2>&1) || true
    stop_server
    case "$mode" in
        echo) units=$(field "$out" msgs) ;;
        churn) units=$(field "$out" cycles) ;;
    esac
    if [ -z "$units" ] || [ "$units" = 0 ]; then say "$api $mode: loadgen failed: $out"; exit 1; fi
    echo "$(instructions "$file") $units"
}

run_reply_path() {  # duration → "user kernel units"
    local duration=$1 file="$OUT/reply-$1.out" out units echo_pid echo_port
    if [ -x "$uwsdir/uws-echo" ]; then
        echo_port=19950
        PORT=$echo_port taskset -c 0 "$uwsdir/uws-echo" > "$OUT/uws.log" 2>&1 &
        echo_pid=$!
        for _ in $(seq 1 100); do grep -q listening "$OUT/uws.log" && break; sleep 0.05; done
    else
        start_echo_server callbacks "" native
        echo_pid=$pid echo_port=$port pid=""
    fi
    out=$(taskset -c 1 perf stat -x, -e "$events" -o "$file" "$clientbin/client-bench" \
        --mode reply --port "$echo_port" --size 60 --window 64 --duration "$duration" --warmup 0 2>&1) || true
    kill -TERM "$echo_pid" 2>/dev/null || true
    wait "$echo_pid" 2>/dev/null || true
    units=$(field "$out" lines)
    if [ -z "$units" ] || [ "$units" = 0 ]; then say "reply loop: client-bench failed: $out"; exit 1; fi
    echo "$(instructions "$file") $units"
}

if [ "$COUNT" != instructions ]; then
    [ "$COUNT" = allocations ] && what=mallocs || what="system calls"
    echo "| path | unit | $what per unit | units (runs A, B) |"
    echo "|---|---|---:|---|"
else
    echo "| path | unit | user instructions per unit | kernel instructions per unit | units (runs A, B) |"
    echo "|---|---|---:|---:|---|"
fi
for p in "${paths[@]}"; do
    case "$p" in
        echo-callbacks) unit=message; a=$(run_server_path callbacks echo "$DURATION_A"); b=$(run_server_path callbacks echo "$DURATION_B") ;;
        echo-tasks) unit=message; a=$(run_server_path tasks echo "$DURATION_A"); b=$(run_server_path tasks echo "$DURATION_B") ;;
        churn-callbacks) unit=cycle; a=$(run_server_path callbacks churn "$DURATION_A"); b=$(run_server_path callbacks churn "$DURATION_B") ;;
        churn-tasks) unit=cycle; a=$(run_server_path tasks churn "$DURATION_A"); b=$(run_server_path tasks churn "$DURATION_B") ;;
        echo-uws) unit=message; a=$(run_server_path uws echo "$DURATION_A"); b=$(run_server_path uws echo "$DURATION_B") ;;
        churn-uws) unit=cycle; a=$(run_server_path uws churn "$DURATION_A"); b=$(run_server_path uws churn "$DURATION_B") ;;
        reply-loop) unit=line; a=$(run_reply_path "$DURATION_A"); b=$(run_reply_path "$DURATION_B") ;;
        *) say "unknown path $p"; exit 2 ;;
    esac
    read -r ua ka na <<< "$a"
    read -r ub kb nb <<< "$b"
    if [ "$nb" -le "$na" ]; then say "$p: the longer run counted no more units ($na, $nb)"; exit 1; fi
    if [ "$COUNT" != instructions ]; then
        echo "| $p | $unit | $(awk -v a="$ua" -v b="$ub" -v m="$na" -v n="$nb" 'BEGIN {printf "%.2f", (b - a) / (n - m)}') | $na, $nb |"
    else
        echo "| $p | $unit | $(( (ub - ua) / (nb - na) )) | $(( (kb - ka) / (nb - na) )) | $na, $nb |"
    fi
done
say "perf's files in $OUT${EVENT_LOOP:+ (servers on $EVENT_LOOP)}"
