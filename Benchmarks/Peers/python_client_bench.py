#!/usr/bin/env python3
"""Client benchmark peer: Python `websockets` (17.x) asyncio client, the same modes, flags and
output line as Switchboard's `client-bench`.

- pipelined: against an echo server, sends --size-byte lines (newline included), each as one text
  message, keeping --window of them in flight (a sender task takes one credit per line; the
  receiving loop gives one back per line received).
- reply: against an echo server, the loop applications write: --window lines sent first, then
  one reply sent from the receiving loop for every line received (`await ws.send(...)` inside
  `async for`). Each line starts with its send time (16 hex digits of CLOCK_MONOTONIC
  nanoseconds); p50_us and p99_us of the round trips are added to the result.
- stream: against a server that streams lines (line-streamer), only receives.

Received messages are split into lines on "\\n" with a carry-over buffer (a line may span
messages), like Switchboard's `lines()`. Counts lines received during --duration seconds after
--warmup and prints `result mode=... lines_per_s=... lines=... size=... window=... cpu=...%`.

Settings changed from the library's defaults, and why:
- compression None (default: offers permessage-deflate): the Switchboard client does not compress.
- max_size None: the streaming server's frames are small, but no limit should matter here.
- proxy None: never go through a proxy from the environment.
- close_timeout 2 s (default 10): as the Switchboard client; the result is printed before closing.
"""

import argparse
import asyncio
import resource
import sys
import time

from websockets.asyncio.client import connect


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def main():
    parser = argparse.ArgumentParser(description="Python websockets client benchmark.")
    parser.add_argument("--mode", choices=["pipelined", "reply", "stream"], default="pipelined")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9001)
    parser.add_argument("--path", default="/")
    parser.add_argument("--size", type=int, default=60, help="bytes per line sent, newline included")
    parser.add_argument("--window", type=int, default=64, help="lines in flight (pipelined)")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds measured")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds before measuring")
    args = parser.parse_args()
    if args.size < 2 or args.window < 1 or args.duration <= 0 or args.warmup < 0:
        parser.error("--size >= 2, --window >= 1, --duration > 0, --warmup >= 0")
    if args.mode == "reply" and args.size < 18:
        parser.error("--size >= 18 in reply mode (a 16-digit time stamp and the newline)")

    url = f"ws://{args.host}:{args.port}{args.path}"
    async with connect(url, compression=None, max_size=None, proxy=None,
                       close_timeout=2) as ws:
        if args.mode == "reply":
            await reply_loop(ws, args)
            return
        sender = None
        credits = None
        if args.mode == "pipelined":
            credits = asyncio.Semaphore(args.window)
            line = "x" * (args.size - 1) + "\n"

            async def send_lines():
                while True:
                    await credits.acquire()
                    await ws.send(line)

            sender = asyncio.create_task(send_lines())

        measure_from = time.monotonic() + args.warmup
        measure_until = measure_from + args.duration
        measured = 0
        cpu_start = None
        buffer = ""
        finished = False
        async for message in ws:
            if isinstance(message, bytes):
                message = message.decode()
            parts = (buffer + message).split("\n")
            buffer = parts.pop()
            lines = sum(1 for p in parts if p)
            if credits is not None:
                for _ in range(lines):
                    credits.release()
            now = time.monotonic()
            if now >= measure_until:
                finished = True
                break
            if now >= measure_from:
                if cpu_start is None:
                    cpu_start = cpu_seconds()
                measured += lines
        cpu = cpu_seconds() - (cpu_start if cpu_start is not None else cpu_seconds())
        if sender is not None:
            sender.cancel()
        if not finished:
            print("python_client_bench: the connection ended early", file=sys.stderr)
            sys.exit(1)
        print(f"result mode={args.mode} lines_per_s={measured / args.duration:.0f} lines={measured} "
              f"size={args.size} window={args.window if args.mode == 'pipelined' else 0} "
              f"cpu={100 * cpu / args.duration:.0f}%", flush=True)


async def reply_loop(ws, args):
    padding = "x" * (args.size - 17) + "\n"

    def stamped():
        return f"{time.monotonic_ns():016x}" + padding

    for _ in range(args.window):
        await ws.send(stamped())
    start = time.monotonic_ns()
    measure_from = start + int(args.warmup * 1e9)
    measure_until = measure_from + int(args.duration * 1e9)
    latencies = []
    cpu_start = None
    buffer = ""
    finished = False
    async for message in ws:
        if isinstance(message, bytes):
            message = message.decode()
        parts = (buffer + message).split("\n")
        buffer = parts.pop()
        for line in parts:
            if not line:
                continue
            now = time.monotonic_ns()
            if now >= measure_until:
                finished = True
                break
            if now >= measure_from:
                if cpu_start is None:
                    cpu_start = cpu_seconds()
                try:
                    latencies.append(now - int(line[:16], 16))
                except ValueError:
                    pass
            await ws.send(stamped())
        if finished:
            break
    cpu = cpu_seconds() - (cpu_start if cpu_start is not None else cpu_seconds())
    if not finished:
        print("python_client_bench: the connection ended early", file=sys.stderr)
        sys.exit(1)
    latencies.sort()

    def percentile(p):
        return latencies[min(len(latencies) - 1, int(len(latencies) * p))] / 1000 if latencies else 0

    print(f"result mode=reply lines_per_s={len(latencies) / args.duration:.0f} lines={len(latencies)} "
          f"size={args.size} window={args.window} cpu={100 * cpu / args.duration:.0f}% "
          f"p50_us={percentile(0.5):.0f} p99_us={percentile(0.99):.0f}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
