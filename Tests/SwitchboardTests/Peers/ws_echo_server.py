#!/usr/bin/env python3
"""Interop peer for Switchboard's client tests: a Python `websockets` server.

Usage: ws_echo_server.py --port 0 [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]
                            [--tls-max-version 1.2|1.3]] [--deflate MODE] [--silent]

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
  /extensions    sends the Sec-WebSocket-Extensions answer it gave (empty if none), then echoes
  /cookie        the handshake response carries `Set-Cookie: session=abc123; Path=/; HttpOnly`;
                 sends one text message, the request's Cookie header ("" if none; several
                 joined with "; "), then closes with 1000
  /whoami        sends one text message, the verified client certificate's subject in RFC 4514
                 form, most specific attribute first (`CN=alice,O=Example`, as OpenSSL's
                 XN_FLAG_RFC2253 without ESC_MSB prints it: UTF-8 kept; an attribute OpenSSL
                 has no name for shows as `1.2.3=value`, where OpenSSL dumps `#hex`), then
                 closes with 1000; "" when no client certificate was presented (plain TCP, or
                 TLS without --tls-client-ca)
  /tls-version   sends one text message, the negotiated TLS version (`TLSv1.2`, `TLSv1.3`;
                 "" over plain TCP), then closes with 1000

--tls-cert/--tls-key: serve TLS with this certificate chain and key (PEM).
--tls-client-ca FILE: require a client certificate that verifies against the CA(s) in FILE
  (ssl.CERT_REQUIRED): a client without one, or with one that does not verify, fails the TLS
  handshake (over TLS 1.3 the client learns it from an alert after its side of the handshake).
--tls-max-version 1.2|1.3: the highest TLS version the server accepts (default: OpenSSL's).
--deflate off|takeover|none: accept permessage-deflate (see --help).

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


# OpenSSL's short names (XN_FLAG_FN_SN) for the long names `getpeercert()` reports.
SHORT_NAMES = {
    "commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
    "streetAddress": "street", "organizationName": "O", "organizationalUnitName": "OU",
    "domainComponent": "DC", "userId": "UID", "surname": "SN", "givenName": "GN",
    "jurisdictionCountryName": "jurisdictionC", "jurisdictionStateOrProvinceName": "jurisdictionST",
    "jurisdictionLocalityName": "jurisdictionL",
}

RFC4514_SPECIALS = ',+"\\<>;'


def rfc4514_value(value: str) -> str:
    # The escapes of OpenSSL's ASN1_STRFLGS_ESC_2253 | ESC_CTRL (not ESC_MSB): specials get a
    # backslash, so do a leading "#" or space and a trailing space; control characters become
    # "\XX"; everything else (UTF-8 included) stays as it is.
    out = []
    last = len(value) - 1
    for i, ch in enumerate(value):
        if ch in RFC4514_SPECIALS or (i == 0 and ch in "# ") or (i == last and ch == " "):
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("\\%02X" % ord(ch))
        else:
            out.append(ch)
    return "".join(out)


def rfc4514_subject(cert) -> str:
    """The subject of a `getpeercert()` dict as RFC 4514, most specific RDN first.

    Like OpenSSL (XN_FLAG_DN_REV), the attributes of a multi-valued RDN come reversed too.
    """
    if not cert:
        return ""
    rdns = []
    for rdn in reversed(cert.get("subject", ())):
        rdns.append("+".join(SHORT_NAMES.get(name, name) + "=" + rfc4514_value(value)
                             for name, value in reversed(rdn)))
    return ",".join(rdns)


def ssl_object(ws):
    return ws.transport.get_extra_info("ssl_object") if ws.transport is not None else None


async def whoami(ws):
    tls = ssl_object(ws)
    await ws.send(rfc4514_subject(tls.getpeercert()) if tls is not None else "")
    await ws.close()


async def tls_version(ws):
    tls = ssl_object(ws)
    await ws.send((tls.version() or "") if tls is not None else "")
    await ws.close()


async def cookie(ws):
    await ws.send("; ".join(ws.request.headers.get_all("Cookie")))
    await ws.close()


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
    "/cookie": cookie,
    "/whoami": whoami,
    "/tls-version": tls_version,
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


def process_response(connection, request, response):
    if request.path.split("?", 1)[0] == "/cookie" and response.status_code == 101:
        response.headers["Set-Cookie"] = "session=abc123; Path=/; HttpOnly"
    return None


# ---- main ----

def exit_on_stdin_eof() -> None:
    def watch():
        try:
            # os.read, not sys.stdin: a thread blocked in the buffered reader holds its lock,
            # and the interpreter then aborts when it exits another way (SIGTERM, usage error).
            while os.read(0, 4096):
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
    parser.add_argument("--tls-client-ca",
                        help="require a client certificate verified against these CA(s)")
    parser.add_argument("--tls-max-version", choices=["1.2", "1.3"],
                        help="the highest TLS version to accept")
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
        if args.tls_client_ca:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cafile=args.tls_client_ca)
        if args.tls_max_version:
            context.maximum_version = {"1.2": ssl.TLSVersion.TLSv1_2,
                                       "1.3": ssl.TLSVersion.TLSv1_3}[args.tls_max_version]
    elif args.tls_client_ca or args.tls_max_version:
        parser.error("--tls-client-ca and --tls-max-version need --tls-cert and --tls-key")

    extensions = []
    if args.deflate != "off":
        from websockets.extensions.permessage_deflate import ServerPerMessageDeflateFactory
        if args.deflate == "none":
            extensions = [ServerPerMessageDeflateFactory(server_no_context_takeover=True,
                                                         client_no_context_takeover=True)]
        else:
            extensions = [ServerPerMessageDeflateFactory()]
    async with serve(handler, "127.0.0.1", args.port, ssl=context, max_size=64 * 1024 * 1024,
                     process_request=process_request, process_response=process_response,
                     compression=None,
                     extensions=extensions) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        out(f"PORT {port}")
        await stop


if __name__ == "__main__":
    exit_on_stdin_eof()
    asyncio.run(main())
