"""A TLS WebSocket client written by hand on Python's ssl module: upgrades, sends a close frame,
reads the server's close frame, then reads to the end of the stream and reports whether the
server ended TLS with close_notify (recv returns b"") or dropped TCP without it (SSLEOFError).

Usage: tls_close_notify.py PORT CA_FILE. Prints one JSON object.
"""
import json
import os
import socket
import ssl
import sys


def main():
    port, ca = int(sys.argv[1]), sys.argv[2]
    ctx = ssl.create_default_context(cafile=ca)
    raw = socket.create_connection(("127.0.0.1", port), timeout=60)  # a failure guard only: generous
    tls = ctx.wrap_socket(raw, server_hostname="localhost")
    tls.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = tls.recv(4096)
        if not chunk:
            print(json.dumps({"event": "error", "message": "eof during handshake"}))
            return
        data += chunk
    head, data = data.split(b"\r\n\r\n", 1)
    status = int(head.split(b" ")[1])
    key = os.urandom(4)
    payload = (1000).to_bytes(2, "big")
    tls.sendall(bytes([0x88, 0x80 | len(payload)]) + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload)))
    # The server's close frame (unmasked, short): opcode byte, length byte, payload.
    while len(data) < 2 or len(data) < 2 + (data[1] & 0x7F):
        chunk = tls.recv(4096)
        if not chunk:
            break
        data += chunk
    close_code = int.from_bytes(data[2:4], "big") if len(data) >= 4 and data[0] & 0x0F == 8 else None
    ending = "close_notify"
    try:
        while tls.recv(4096):
            pass
    except ssl.SSLEOFError:
        ending = "eof_without_close_notify"
    except OSError as e:
        ending = f"error: {e}"
    print(json.dumps({"event": "done", "status": status, "close": close_code, "ending": ending}))


if __name__ == "__main__":
    main()
