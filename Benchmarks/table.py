#!/usr/bin/env python3
"""Turns Benchmarks/run.sh's results.tsv into one Markdown table.

Each cell: median (min–max) over the rounds. The last columns give Switchboard / peer of
the medians (for memory, lower is better, so a ratio under 1 means Switchboard uses less).
"""
import statistics
import sys

results_path, servers_arg, scenarios_arg = sys.argv[1], sys.argv[2], sys.argv[3]
servers = servers_arg.split()
scenarios = [line.split("|") for line in scenarios_arg.strip().splitlines() if line.strip()]
names = {"switchboard": "Switchboard (callbacks)", "switchboard-tasks": "Switchboard (tasks)",
         "nio": "raw SwiftNIO", "hummingbird": "Hummingbird 2", "python": "Python websockets"}

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
    return f"{x:.2f}"


def cell(server, scenario):
    vs = values.get((server, scenario))
    failed = failures.get((server, scenario), 0)
    if not vs:
        return "failed" if failed else "—"
    text = f"{fmt(statistics.median(vs))} ({fmt(min(vs))}–{fmt(max(vs))})" if len(vs) > 1 else fmt(vs[0])
    return text + (f" ({failed} failed)" if failed else "")


peers = [s for s in servers if not s.startswith("switchboard")]
header = ["scenario", "unit"] + [names.get(s, s) for s in servers]
if "switchboard" in servers:
    header += [f"SB / {names.get(p, p)}" for p in peers]
if "switchboard-tasks" in servers and "nio" in servers:
    header += ["SB tasks / raw SwiftNIO"]
print("| " + " | ".join(header) + " |")
print("|" + "|".join(["---"] * 2 + ["---:"] * (len(header) - 2)) + "|")
for name, _args, _field, unit in scenarios:
    if not any((s, name) in values or (s, name) in failures for s in servers):
        continue
    row = [name, unit] + [cell(s, name) for s in servers]
    if "switchboard" in servers:
        sb = values.get(("switchboard", name))
        for p in peers:
            pv = values.get((p, name))
            if sb and pv and statistics.median(pv) > 0:
                row.append(f"{statistics.median(sb) / statistics.median(pv):.2f}×")
            else:
                row.append("—")
    if "switchboard-tasks" in servers and "nio" in servers:
        st, nv = values.get(("switchboard-tasks", name)), values.get(("nio", name))
        row.append(f"{statistics.median(st) / statistics.median(nv):.2f}×" if st and nv else "—")
    print("| " + " | ".join(row) + " |")
