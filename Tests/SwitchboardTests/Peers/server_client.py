#!/usr/bin/env python3
"""A WebSocket client written with the `websockets` library (not by us), used by the Swift tests
to drive Switchboard's *server*.

Usage: server_client.py SCENARIO PORT [ARGS...]

Every result is printed as one JSON object per line on stdout; the exit code is 0 when the
scenario ran to its end (the Swift test then checks the results) and 1 on an unexpected error.
Exit code 3 means the `websockets` package is not installed.
"""

import asyncio
import json
import sys

try:
    import websockets
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidStatus
except ImportError as e:  # pragma: no cover - reported by the Swift helper
    print(json.dumps({"event": "error", "message": f"python package 'websockets' is missing: {e}"}))
    sys.exit(3)


# Every wait below is for something that must happen; the bound only ends a failing run, so it
# is generous: the server may run under ThreadSanitizer (5-10x slower) on a loaded machine.
WAIT = 60


def connect_to(port, path, **kwargs):
    """`connect` with the generous opening and closing handshake bounds."""
    kwargs.setdefault("open_timeout", WAIT)
    kwargs.setdefault("close_timeout", WAIT)
    return connect(url(port, path), **kwargs)


def emit(**obj):
    print(json.dumps(obj), flush=True)


def close_code(ws):
    return ws.close_code if ws.close_code is not None else None


def url(port, path):
    return f"ws://127.0.0.1:{port}{path}"


async def scenario_echo(port, path):
    """One text and one binary message, each echoed back, then a normal close."""
    async with connect_to(port, path, max_size=None) as ws:
        text = "héllo ✓ switchboard"
        await ws.send(text)
        got = await asyncio.wait_for(ws.recv(), WAIT)
        emit(event="text", sent=text, received=got, is_str=isinstance(got, str))
        blob = bytes(range(256)) * 4
        await ws.send(blob)
        got = await asyncio.wait_for(ws.recv(), WAIT)
        emit(event="binary", sent=blob.hex(), received=got.hex() if isinstance(got, bytes) else None,
             is_bytes=isinstance(got, bytes))
    emit(event="closed", code=close_code(ws))


async def scenario_connect(port, path, args):
    """Options: --header K:V, --subprotocol P, --origin O, --send MSG (each answered by one reply).
    Prints `rejected` (status, headers, body) or `open`, `message`s, then `closed`."""
    headers, subprotocols, origin, sends = [], [], None, []
    it = iter(args)
    for a in it:
        if a == "--header":
            k, v = next(it).split(":", 1)
            headers.append((k.strip(), v.strip()))
        elif a == "--subprotocol":
            subprotocols.append(next(it))
        elif a == "--origin":
            origin = next(it)
        elif a == "--send":
            sends.append(next(it))
        else:
            raise SystemExit(f"unknown option {a}")
    kwargs = {"additional_headers": headers}
    if subprotocols:
        kwargs["subprotocols"] = subprotocols
    if origin:
        kwargs["origin"] = origin
    try:
        ws = await connect_to(port, path, **kwargs)
    except InvalidStatus as e:
        r = e.response
        emit(event="rejected", status=r.status_code,
             headers={k.lower(): v for k, v in r.headers.raw_items()},
             body=r.body.decode("utf-8", "replace") if r.body else "")
        return
    emit(event="open", subprotocol=ws.subprotocol)
    try:
        for s in sends:
            await ws.send(s)
            got = await asyncio.wait_for(ws.recv(), WAIT)
            emit(event="message", data=got if isinstance(got, str) else got.hex())
    finally:
        await ws.close()
    emit(event="closed", code=close_code(ws))


async def scenario_receive_first(port, path, args):
    """Connects (subprotocols from args) and prints the first message the server sends."""
    async with connect_to(port, path, subprotocols=args or None) as ws:
        emit(event="open", subprotocol=ws.subprotocol)
        got = await asyncio.wait_for(ws.recv(), WAIT)
        emit(event="message", data=got)
    emit(event="closed", code=close_code(ws))


async def scenario_oversize(port, path, size):
    """Sends one text message of `size` bytes; prints the close code the server answers with."""
    async with connect_to(port, path) as ws:
        await ws.send("x" * size)
        try:
            got = await asyncio.wait_for(ws.recv(), WAIT)
            emit(event="message", size=len(got))
        except ConnectionClosed as e:
            emit(event="closed", code=e.rcvd.code if e.rcvd else None,
                 reason=e.rcvd.reason if e.rcvd else None)
            return
    emit(event="closed", code=close_code(ws), reason=None)


async def scenario_fanout(port, path, n):
    """N clients; each waits for "subscribed". Client 0 asks "count", publishes, every other client
    must receive the payload; client 0 then asks "count" again (an echo sent on the same connection
    after the publish would have arrived first if the server had not excluded it)."""
    clients = [await connect_to(port, path) for _ in range(n)]
    for ws in clients:
        got = await asyncio.wait_for(ws.recv(), WAIT)
        assert got == "subscribed", got
    sender = clients[0]
    await sender.send("count")
    emit(event="count_before", value=await asyncio.wait_for(sender.recv(), WAIT))

    payload = "fan-out payload ✓"
    await sender.send("publish:" + payload)

    async def take(ws):
        return await asyncio.wait_for(ws.recv(), WAIT)

    results = await asyncio.gather(*(take(ws) for ws in clients[1:]), return_exceptions=True)
    received = sum(1 for r in results if r == payload)
    emit(event="fanout", receivers=len(clients) - 1, received=received,
         wrong=[repr(r) for r in results if r != payload][:5])
    await sender.send("count")
    emit(event="sender_next", value=await asyncio.wait_for(sender.recv(), WAIT))
    await asyncio.gather(*(ws.close() for ws in clients))
    emit(event="closed", codes=sorted({ws.close_code for ws in clients}))


async def scenario_counted_subscriber(port, path, total, window):
    """Receives `total` numbered binary messages (first 8 bytes = big-endian index), acks every
    `window // 2` messages with "ack:<count>", checks the order, prints the count."""
    async with connect_to(port, path, max_size=None) as ws:
        emit(event="open")
        expected, in_order = 0, True
        step = max(1, window // 2)
        while expected < total:
            got = await asyncio.wait_for(ws.recv(), WAIT)
            idx = int.from_bytes(got[:8], "big") if isinstance(got, bytes) else -1
            if idx != expected or len(got) != 64 * 1024:
                in_order = False
            expected += 1
            if expected % step == 0 or expected == total:
                await ws.send(f"ack:{expected}")
        emit(event="done", received=expected, in_order=in_order)
    emit(event="closed", code=close_code(ws))


async def scenario_shutdown(port, path, n):
    """N clients that record every message and the close code the server ends them with."""
    clients = [await connect_to(port, path) for _ in range(n)]
    emit(event="connected", n=len(clients))

    async def watch(i, ws):
        messages = []
        try:
            while True:
                messages.append(await asyncio.wait_for(ws.recv(), WAIT))
        except ConnectionClosed as e:
            code = e.rcvd.code if e.rcvd else None
        except asyncio.TimeoutError:
            code = "timeout"
        emit(event="closed", index=i, code=code, messages=messages)

    await asyncio.gather(*(watch(i, ws) for i, ws in enumerate(clients)))


def deflate_factories(mode):
    """The client's permessage-deflate offer: `takeover` (the library's default, context takeover
    both ways), `none` (no context takeover either way), `off` (no offer)."""
    from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory
    if mode == "off":
        return []
    if mode == "none":
        return [ClientPerMessageDeflateFactory(server_no_context_takeover=True, client_no_context_takeover=True)]
    return [ClientPerMessageDeflateFactory(client_max_window_bits=True)]


def json_message(i, size):
    """JSON-like text of about `size` bytes (what chat and telemetry traffic looks like)."""
    parts = []
    n = i
    while sum(len(p) for p in parts) < size:
        parts.append(json.dumps({"user": f"user{n % 7}", "room": "lobby", "seq": n,
                                 "text": f"message {n} from the deflate scenario"}))
        n += 1
    return "[" + ",".join(parts)[: size - 2] + "]"


async def scenario_deflate(port, path, mode, count):
    """Offers permessage-deflate per `mode`, sends `count` JSON messages of 1-4 KiB and one binary,
    each echoed back; prints the negotiated extension, how many echoes matched, and the close."""
    async with connect_to(port, path, extensions=deflate_factories(mode), compression=None,
                          max_size=None) as ws:
        emit(event="open", extensions=ws.response.headers.get("Sec-WebSocket-Extensions"))
        matched = 0
        for i in range(count):
            msg = json_message(i, 1024 * (1 + i % 4))
            await ws.send(msg)
            got = await asyncio.wait_for(ws.recv(), WAIT)
            matched += got == msg
        blob = bytes(range(256)) * 64
        await ws.send(blob)
        got = await asyncio.wait_for(ws.recv(), WAIT)
        emit(event="echoes", matched=matched, count=count, binary=got == blob)
    emit(event="closed", code=close_code(ws))


async def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    name, port, rest = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    if name == "echo":
        await scenario_echo(port, rest[0])
    elif name == "connect":
        await scenario_connect(port, rest[0], rest[1:])
    elif name == "receive_first":
        await scenario_receive_first(port, rest[0], rest[1:])
    elif name == "oversize":
        await scenario_oversize(port, rest[0], int(rest[1]))
    elif name == "fanout":
        await scenario_fanout(port, rest[0], int(rest[1]))
    elif name == "counted_subscriber":
        await scenario_counted_subscriber(port, rest[0], int(rest[1]), int(rest[2]))
    elif name == "shutdown":
        await scenario_shutdown(port, rest[0], int(rest[1]))
    elif name == "deflate":
        await scenario_deflate(port, rest[0], rest[1], int(rest[2]))
    else:
        raise SystemExit(f"unknown scenario {name}")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except SystemExit:
        raise
    except BaseException as e:  # report, and fail
        emit(event="error", type=type(e).__name__, message=str(e))
        sys.exit(1)
    sys.exit(0)
