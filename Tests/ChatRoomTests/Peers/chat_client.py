#!/usr/bin/env python3
"""A chat peer driven over stdin/stdout, for the ChatRoomTests.

Usage: chat_client.py WS_URL
Every stdin line is sent as one text message (a newline is appended); every received line is
printed to stdout (flushed). When the server closes, prints `CLOSED <code> <reason>`.
At stdin EOF, closes the connection (1000) and exits 0. Exits 3 if `websockets` is missing.
"""
import asyncio
import sys

try:
    import websockets
except ImportError:
    print("python3 module 'websockets' is not installed (pip install websockets)", file=sys.stderr, flush=True)
    sys.exit(3)


async def main(url: str) -> int:
    async with websockets.connect(url) as ws:
        print("OPEN", flush=True)

        async def receive():
            buffer = ""
            try:
                async for message in ws:
                    buffer += message if isinstance(message, str) else message.decode()
                    while "\n" in buffer:
                        line, buffer = buffer.split("\n", 1)
                        if line.strip():
                            print(line, flush=True)
            except websockets.ConnectionClosed:
                pass
            print(f"CLOSED {ws.close_code if ws.close_code is not None else 1006} {ws.close_reason or ''}", flush=True)

        receiver = asyncio.create_task(receive())
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            try:
                await ws.send(line.rstrip("\n") + "\n")
            except websockets.ConnectionClosed:
                break
        await ws.close()
        await receiver
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
