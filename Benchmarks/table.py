#!/usr/bin/env python3
"""Turns Benchmarks/run.sh's results.tsv into Markdown tables: servers, then (when the client
benchmark ran) clients.

    table.py RESULTS SERVERS SCENARIOS [CLIENTS CLIENT_SCENARIOS]

Each cell: median (min–max) over the rounds. The last columns give Switchboard / peer of
the medians (for memory, lower is better, so a ratio under 1 means Switchboard uses less).
With uWebSockets in the run, "SB callbacks / uWS" and "SB tasks / uWS" come first.

When RESULTS' folder holds a non-empty wire.tsv (run.sh writes it for the JSON and compressed
scenarios: server, scenario, round, conns, negotiated, payload_sent, wire_sent, payload_recv,
wire_recv), a third table gives the bytes on the wire saved: 1 - frame bytes / message bytes,
summed over the rounds, per direction and both together.

When RESULTS' folder holds a non-empty redis.tsv (run.sh's fanout-redis-16B-1000subs: server,
set-up, round, window, deliveries_per_s, lat_p50_us, lat_p99_us, lost), a table gives the fan-out
to 1,000 subscribers on one process and on two processes through Redis: deliveries per second
(window 4), latency p50 / p99 at window 4 and at window 1, and what the Redis set-ups add to the
"1 process" latency (medians over the rounds). For information only: no ratio to uWebSockets.
"""
import os
import statistics
import sys

results_path, servers_arg, scenarios_arg = sys.argv[1], sys.argv[2], sys.argv[3]
clients_arg = sys.argv[4] if len(sys.argv) > 4 else ""
client_scenarios_arg = sys.argv[5] if len(sys.argv) > 5 else ""
servers = servers_arg.split()
clients = clients_arg.split()


def parse_scenarios(text):
    return [line.split("|") for line in text.strip().splitlines() if line.strip()]


scenarios = parse_scenarios(scenarios_arg)
client_scenarios = parse_scenarios(client_scenarios_arg)
names = {"uws": "uWebSockets", "switchboard": "Switchboard (callbacks)", "switchboard-tasks": "Switchboard (tasks)",
         "base": "baseline (callbacks)", "base-tasks": "baseline (tasks)",
         "nio": "raw SwiftNIO", "hummingbird": "Hummingbird 2", "python": "Python websockets",
         "sb-client": "Switchboard client", "python-client": "Python websockets", "node-client": "Node ws"}

values = {}
failures = {}
with open(results_path) as f:
    for row in f:
        server, scenario, _round, value = row.rstrip("\n").split("\t")
        if value == "failed":
            failures[(server, scenario)] = failures.get((server, scenario), 0) + 1
        else:
            values.setdefault((server, scenario), []).append(float(value))


def fmt(x):
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if 0 < x < 1:
        return f"{x:.3g}"  # three significant digits: churn's CPU-seconds (0.0599) stay readable
    return f"{x:.2f}"


def cell(server, scenario):
    vs = values.get((server, scenario))
    failed = failures.get((server, scenario), 0)
    if not vs:
        return "failed" if failed else "—"
    text = f"{fmt(statistics.median(vs))} ({fmt(min(vs))}–{fmt(max(vs))})" if len(vs) > 1 else fmt(vs[0])
    return text + (f" ({failed} failed)" if failed else "")


def ratio(ours, peer, scenario):
    """Median of `ours` / median of `peer` for the scenario, or "—"."""
    a, b = values.get((ours, scenario)), values.get((peer, scenario))
    if a and b and statistics.median(b) > 0:
        return f"{statistics.median(a) / statistics.median(b):.2f}×"
    return "—"


def table(members, rows, ratio_columns):
    """members: the measured programs (columns); ratio_columns: (header, ours, peer)."""
    header = ["scenario", "unit"] + [names.get(m, m) for m in members] + [h for h, _, _ in ratio_columns]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] * 2 + ["---:"] * (len(header) - 2)) + "|")
    for name, _args, _field, unit in rows:
        if not any((m, name) in values or (m, name) in failures for m in members):
            continue
        row = [name, unit] + [cell(m, name) for m in members]
        row += [ratio(ours, peer, name) for _, ours, peer in ratio_columns]
        print("| " + " | ".join(row) + " |")


# ---- servers ----
server_ratios = []
if "uws" in servers:
    if "switchboard" in servers:
        server_ratios.append(("SB callbacks / uWS", "switchboard", "uws"))
    if "switchboard-tasks" in servers:
        server_ratios.append(("SB tasks / uWS", "switchboard-tasks", "uws"))
if "base" in servers and "switchboard" in servers:
    server_ratios.append(("SB callbacks / baseline", "switchboard", "base"))
if "base-tasks" in servers and "switchboard-tasks" in servers:
    server_ratios.append(("SB tasks / baseline", "switchboard-tasks", "base-tasks"))
if "switchboard" in servers:
    for p in servers:
        if not p.startswith("switchboard") and not p.startswith("base") and p != "uws":
            server_ratios.append((f"SB / {names.get(p, p)}", "switchboard", p))
if "switchboard-tasks" in servers and "nio" in servers:
    server_ratios.append(("SB tasks / raw SwiftNIO", "switchboard-tasks", "nio"))

server_rows_present = any((s, n[0]) in values or (s, n[0]) in failures for s in servers for n in scenarios)
redis_path = os.path.join(os.path.dirname(os.path.abspath(results_path)), "redis.tsv")
redis_rows = []
if os.path.exists(redis_path):
    with open(redis_path) as f:
        redis_rows = [row.rstrip("\n").split("\t") for row in f if row.strip()]
        redis_rows = [r for r in redis_rows if len(r) == 8]
if clients and server_rows_present:
    print("### Servers\n")
if server_rows_present or not (clients or redis_rows):
    table(servers, scenarios, server_ratios)
    if server_ratios:
        hold_names = "hold-idle" if not any(n[0].startswith("hold-idle-") and any((s, n[0]) in values for s in servers)
                                            for n in scenarios) else "hold-idle and hold-idle-*"
        print("\nRatios: Switchboard / peer of the medians; above 1× Switchboard is faster, except for "
              f"{hold_names} (memory per idle connection, lower is better), where under 1× means Switchboard "
              "uses less memory, and churn-* (server CPU-seconds per 1,000 connect-echo-close cycles, lower is "
              "better), where under 1× means Switchboard spends less CPU per connection.")

# ---- bytes on the wire (JSON and compressed scenarios) ----
wire_path = os.path.join(os.path.dirname(os.path.abspath(results_path)), "wire.tsv")
wire = {}
if os.path.exists(wire_path):
    with open(wire_path) as f:
        for row in f:
            fields = row.rstrip("\n").split("\t")
            if len(fields) != 9 or not all(fields[3:]):
                continue
            server, scenario = fields[0], fields[1]
            nums = [int(x) for x in fields[3:]]
            acc = wire.setdefault((server, scenario), [0, None, 0, 0, 0, 0])
            acc[0] = nums[0]                       # conns
            acc[1] = nums[1] if acc[1] is None else min(acc[1], nums[1])  # negotiated (fewest of the rounds)
            for i in range(2, 6):
                acc[i] += nums[i]


def saved(wire_bytes, payload_bytes):
    return f"{100 * (1 - wire_bytes / payload_bytes):.1f}%" if payload_bytes else "—"


if wire and server_rows_present:
    print("\n### Bytes on the wire\n")
    print("| scenario | server | deflate negotiated | saved client→server | saved server→client | saved total | message bytes / frame bytes |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, args, _field, _unit in scenarios:
        for server in servers:
            acc = wire.get((server, name))
            if not acc:
                continue
            conns, neg, ps, ws, pr, wr = acc
            negotiated = f"{neg}/{conns}" if "--deflate" in args else "—"
            ratio_text = f"{(ps + pr) / (ws + wr):.2f}×" if ws + wr else "—"
            print(f"| {name} | {names.get(server, server)} | {negotiated} | {saved(ws, ps)} | {saved(wr, pr)} | "
                  f"{saved(ws + wr, ps + pr)} | {ratio_text} |")
    print("\nSaved = 1 - frame bytes / message bytes over the measured window (all rounds), frame bytes being "
          "what crossed the socket after compression (headers and mask keys included, the HTTP upgrade "
          "excluded); the uncompressed rows are slightly negative (frame headers). hold-* rows: the one "
          "message per connection.")

# ---- fan-out across processes through Redis ----
if redis_rows:
    redis = {}      # (server, setup, window) -> {"dps": [...], "p50": [...], "p99": [...], "lost": [...]}
    redis_failed = {}
    order = []
    for server, setup, _round, window, dps, p50, p99, lost in redis_rows:
        if (server, setup) not in order:
            order.append((server, setup))
        key = (server, setup, window)
        if dps == "failed":
            redis_failed[key] = redis_failed.get(key, 0) + 1
            continue
        acc = redis.setdefault(key, {"dps": [], "p50": [], "p99": [], "lost": []})
        for k, v in (("dps", dps), ("p50", p50), ("p99", p99), ("lost", lost)):
            acc[k].append(float(v))

    def med(server, setup, window, k):
        acc = redis.get((server, setup, window))
        return statistics.median(acc[k]) if acc else None

    def ms(us):
        return "—" if us is None else f"{us / 1000:.2f}"

    def lat(server, setup, window):
        p50, p99 = med(server, setup, window, "p50"), med(server, setup, window, "p99")
        if p50 is None:
            return "failed" if redis_failed.get((server, setup, window)) else "—"
        return f"{ms(p50)} / {ms(p99)}"

    def added(server, setup, window):
        if setup == "1 process":
            return "—"
        a50, a99 = med(server, setup, window, "p50"), med(server, setup, window, "p99")
        b50, b99 = med(server, "1 process", window, "p50"), med(server, "1 process", window, "p99")
        if None in (a50, a99, b50, b99):
            return "—"
        return f"{(a50 - b50) / 1000:+.2f} / {(a99 - b99) / 1000:+.2f}"

    print(("\n" if server_rows_present else "") + "### Fan-out across processes through Redis (information only)\n")
    print("| server | set-up | deliveries/s (window 4) | p50 / p99 ms, window 4 | added | "
          "p50 / p99 ms, window 1 | added | lost |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for server, setup in order:
        vs = redis.get((server, setup, "4"), {}).get("dps")
        if vs:
            dps = f"{fmt(statistics.median(vs))} ({fmt(min(vs))}–{fmt(max(vs))})" if len(vs) > 1 else fmt(vs[0])
        else:
            dps = "failed" if redis_failed.get((server, setup, "4")) else "—"
        lost = sum(sum(redis.get((server, setup, w), {}).get("lost", [])) for w in ("4", "1"))
        print(f"| {names.get(server, server)} | {setup} | {dps} | {lat(server, setup, '4')} | {added(server, setup, '4')} | "
              f"{lat(server, setup, '1')} | {added(server, setup, '1')} | {lost:.0f} |")
    print("\n1,000 subscribers of /broadcast and one publisher (16-byte messages); \"2 processes + Redis\": two "
          "echo-servers sharing one redis-server, every other subscriber on the second, the publisher on the "
          "first; \"2 processes + Redis Cluster\": the same through a three-master Redis Cluster (sharded pub/sub, the topic's channel on the shard of its slot). Every echo-server on CPU 0 (the two processes share that core), the Redis servers and loadgen on "
          "CPU 1. Latency: publish → delivery over every delivery in the window, medians of the rounds' "
          "percentiles; window 4 is the deliveries/s load (4 messages in flight behind the slowest "
          "subscriber), window 1 one message at a time. Added: minus the \"1 process\" figure. Lost: "
          "messages a subscriber skipped in the measured windows (all rounds). For information only: not "
          "compared with uWebSockets (2 cores cannot pin four processes).")

# ---- clients ----
if clients:
    client_ratios = [(f"SB / {short}", "sb-client", c) for c, short in
                     (("python-client", "Python"), ("node-client", "Node")) if c in clients and "sb-client" in clients]
    print(("\n" if server_rows_present else "") + "### Clients\n")
    table(clients, client_scenarios, client_ratios)
    print("\nOne connection per client (Switchboard's SocketAdapter, Python websockets, Node ws) on "
          "CPU 1, the server on CPU 0. Ratios: Switchboard client / peer of the medians; above 1× "
          "Switchboard's client handles more lines per second.")
