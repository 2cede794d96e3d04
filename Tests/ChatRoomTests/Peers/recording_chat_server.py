#!/usr/bin/env python3
"""A stand-in chat server that records what clients send, for the ChatRoomTests.

Usage: recording_chat_server.py
Listens on 127.0.0.1 (an ephemeral port) at any path and prints `LISTENING <port>`. Every line
a client sends is printed as `conn<N> <line>` (N counts connections from 1). A `join` is
answered with a `presence` carrying the rejoinKey `key-<room>-<N>` and a `history` holding one
message with id 41+N. Runs until stdin closes. Exits 3 if `websockets` is missing.
"""
import asyncio
import json
import sys

try:
    from websockets.asyncio.server import serve
    from websockets.exceptions import ConnectionClosed
except ImportError:
    print("python3 module 'websockets' (>= 13) is not installed (pip install websockets)", file=sys.stderr, flush=True)
    sys.exit(3)


async def main() -> int:
    count = 0

    async def handler(ws):
        nonlocal count
        count += 1
        n = count
        buffer = ""
        try:
            async for message in ws:
                buffer += message if isinstance(message, str) else message.decode()
                while "\n" in buffer:
                    line, buffer = buffer.split("\n", 1)
                    if not line.strip():
                        continue
                    print(f"conn{n} {line}", flush=True)
                    command = json.loads(line)
                    if command.get("type") != "join":
                        continue
                    room, user = command["room"], command["user"]
                    await ws.send(json.dumps({"type": "presence", "room": room, "users": [user],
                                              "rejoinKey": f"key-{room}-{n}"}) + "\n")
                    await ws.send(json.dumps({"type": "history", "room": room, "messages": [
                        {"type": "message", "id": 41 + n, "room": room, "user": "x", "text": f"m{n}", "ts": 1}]}) + "\n")
        except ConnectionClosed:
            pass

    async with serve(handler, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        print(f"LISTENING {port}", flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
