#!/usr/bin/env python3
"""Comparison peer: a Python `websockets` (17.x) asyncio WebSocket echo server.

Echoes every text and binary message back unchanged, on any path. Settings changed from the
library's defaults, and why:
- max_size 16 MiB (default 1 MiB): 1 MiB echo messages are benchmarked.
- compression None (default permessage-deflate): the other servers do not compress. With
  --deflate, the library's default permessage-deflate instead ("deflate": context takeover
  unless the client asks for none, server and client windows of 2^12, memLevel 5), for the
  compressed scenarios.
- ping_interval None (default: a keepalive ping every 20 s): the other servers send no pings.
- backlog 4096 (asyncio's default is 100), the same as Switchboard's default listen backlog.
Prints one line, `python-echo-server listening on ws://HOST:PORT` (wss:// with --tls-cert and
--tls-key), once listening, then serves until SIGTERM or SIGINT and exits 0.
"""

import argparse
import asyncio
import signal
import ssl
import sys

from websockets.asyncio.server import serve

MAX_MESSAGE_SIZE = 16 * 2**20


async def echo(websocket):
    # Iteration ends when the peer closes; the library answers the close frame itself.
    async for message in websocket:
        await websocket.send(message)


async def main():
    parser = argparse.ArgumentParser(description="Python websockets echo server (benchmark peer).")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=9001, help="port to bind, 0 = ephemeral (default 9001)")
    parser.add_argument("--tls-cert", help="PEM certificate (chain): serve wss://")
    parser.add_argument("--tls-key", help="PEM private key for --tls-cert")
    parser.add_argument("--deflate", action="store_true",
                        help="accept permessage-deflate with the library's defaults (default: compression off)")
    args = parser.parse_args()

    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")

    ssl_context = None
    if args.tls_cert:
        ssl_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ssl_context.load_cert_chain(args.tls_cert, args.tls_key)

    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))

    async with serve(
        echo,
        args.host,
        args.port,
        ssl=ssl_context,
        max_size=MAX_MESSAGE_SIZE,
        compression="deflate" if args.deflate else None,
        ping_interval=None,
        backlog=4096,
    ) as server:
        port = server.sockets[0].getsockname()[1]
        scheme = "wss" if ssl_context else "ws"
        sys.stdout.write(f"python-echo-server listening on {scheme}://{args.host}:{port}\n")
        sys.stdout.flush()
        await stop


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
