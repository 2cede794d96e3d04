#!/usr/bin/env python3
"""Interop peer for Switchboard's client tests: a Python `websockets` server.

Usage: ws_echo_server.py --port 0 [--tls-cert FILE --tls-key FILE] [--silent]

Prints `PORT <n>` as its first stdout line once listening, then behaves by path:

  /echo          echoes every message with the same type (text/binary)
  /lines         scripted newline-delimited payloads:
                   "send-split"   -> JSON lines split across messages, several lines in
                                     one message, "\\n" and "\\r\\n" (a CRLF split across
                                     two messages too), then "END"
                   "send-many N"  -> N numbered lines packed into messages of varied sizes
                                     (text and binary), lines crossing message boundaries,
                                     "\\n" and "\\r\\n" mixed, then "END"
  /close         closes with 4001 "bye" after receiving anything
  /record-close  echoes; when the peer closes, prints `CLOSED <code> <reason>` to stdout
  /forbidden     HTTP 403 with a body (no upgrade)
  /unauthorized  HTTP 401 with a body (no upgrade)

--silent: a plain TCP listener that accepts connections and never answers (no HTTP).

Exits when stdin reaches EOF (so it dies with the test process) and on SIGTERM.
"""

import argparse
import asyncio
import os
import random
import signal
import ssl
import sys
import threading

try:
    from websockets.asyncio.server import serve
    from websockets.exceptions import ConnectionClosed
    from websockets.http11 import Response  # noqa: F401  (import check only)
except ImportError as exc:  # pragma: no cover - reported to the Swift test
    print(f"ERROR: the Python 'websockets' package (>= 13, asyncio API) is required: {exc}",
          file=sys.stderr, flush=True)
    sys.exit(3)

from http import HTTPStatus


def out(line: str) -> None:
    # UTF-8 whatever the locale; flushed at once (the test waits for these lines).
    sys.stdout.buffer.write((line + "\n").encode("utf-8", "replace"))
    sys.stdout.flush()


# ---- scripted line payloads (the Swift test computes the same expectations) ----

SPLIT_MESSAGES = [
    ("text", '{"a":1'),
    ("text", '}\n{"b":'),
    ("text", '2}\n{"c":3}\n{"d":4}\r\n'),
    ("binary", b'{"e":'),
    ("text", '5}\r'),             # CRLF split across two messages
    ("text", '\n{"f":6}\n'),
    ("text", '{"g":"x y"}\r\n{"h":8}\n'),
    ("text", 'END\n'),
]


def many_line(i: int) -> str:
    # Must match `ClientInteropTests.manyLine(_:)`.
    return '{"seq":%d,"pad":"%s"}' % (i, "x" * (i % 37))


def many_messages(n: int):
    parts = []
    for i in range(n):
        parts.append(many_line(i))
        parts.append("\r\n" if i % 3 == 0 else "\n")
    parts.append("END\n")
    blob = "".join(parts).encode()
    rng = random.Random(6455)
    messages = []
    pos = 0
    k = 0
    while pos < len(blob):
        # Mostly small chunks (lines cross boundaries, CRLF gets split), some big ones
        # (many lines in one message).
        size = rng.choice([1, 2, 3, 7, 19, 64, 100, 333, 1000, 4096, 20000])
        chunk = blob[pos:pos + size]
        pos += size
        messages.append(chunk if k % 5 == 4 else chunk.decode())
        k += 1
    return messages


# ---- handlers ----

async def echo(ws):
    async for message in ws:
        await ws.send(message)


async def lines(ws):
    async for message in ws:
        if not isinstance(message, str):
            continue
        if message == "send-split":
            for kind, payload in SPLIT_MESSAGES:
                await ws.send(payload if kind == "text" else bytes(payload))
        elif message.startswith("send-many "):
            for m in many_messages(int(message.split()[1])):
                await ws.send(m)


async def close_after_any(ws):
    await ws.recv()
    await ws.close(4001, "bye")


async def record_close(ws):
    try:
        async for message in ws:
            await ws.send(message)
    finally:
        rcvd = ws.protocol.close_rcvd
        if rcvd is None:
            out("CLOSED none")
        else:
            out(f"CLOSED {rcvd.code} {rcvd.reason}")


async def extensions_then_echo(ws):
    """Sends the Sec-WebSocket-Extensions answer it gave (empty if none), then echoes."""
    await ws.send(ws.response.headers.get("Sec-WebSocket-Extensions", ""))
    await echo(ws)


ROUTES = {
    "/echo": echo,
    "/extensions": extensions_then_echo,
    "/lines": lines,
    "/close": close_after_any,
    "/record-close": record_close,
}


async def handler(ws):
    path = ws.request.path.split("?", 1)[0]
    route = ROUTES.get(path)
    if route is None:
        await ws.close(1008, "no such path")
        return
    try:
        await route(ws)
    except ConnectionClosed:
        pass


def process_request(connection, request):
    path = request.path.split("?", 1)[0]
    if path == "/forbidden":
        return connection.respond(HTTPStatus.FORBIDDEN, "forbidden: peer says no\n")
    if path == "/unauthorized":
        # Deliberately does not echo any request header.
        return connection.respond(HTTPStatus.UNAUTHORIZED, "unauthorized: bad token\n")
    return None


# ---- main ----

def exit_on_stdin_eof() -> None:
    def watch():
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except Exception:
            pass
        os._exit(0)
    threading.Thread(target=watch, daemon=True).start()


async def silent_client(reader, writer):
    try:
        while await reader.read(65536):
            pass
    finally:
        writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    parser.add_argument("--silent", action="store_true")
    parser.add_argument("--deflate", choices=["off", "takeover", "none"], default="off",
                        help="accept permessage-deflate: with context takeover (the websockets "
                             "default) or without it either way")
    args = parser.parse_args()

    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, lambda: stop.done() or stop.set_result(None))

    if args.silent:
        server = await asyncio.start_server(silent_client, "127.0.0.1", args.port)
        out(f"PORT {server.sockets[0].getsockname()[1]}")
        async with server:
            await stop
        return

    context = None
    if args.tls_cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)

    extensions = []
    if args.deflate != "off":
        from websockets.extensions.permessage_deflate import ServerPerMessageDeflateFactory
        if args.deflate == "none":
            extensions = [ServerPerMessageDeflateFactory(server_no_context_takeover=True,
                                                         client_no_context_takeover=True)]
        else:
            extensions = [ServerPerMessageDeflateFactory()]
    async with serve(handler, "127.0.0.1", args.port, ssl=context, max_size=64 * 1024 * 1024,
                     process_request=process_request, compression=None,
                     extensions=extensions) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        out(f"PORT {port}")
        await stop


if __name__ == "__main__":
    exit_on_stdin_eof()
    asyncio.run(main())
