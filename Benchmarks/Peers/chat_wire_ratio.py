#!/usr/bin/env python3
"""Compression on the chat-room's own traffic: bytes on the wire against bytes of messages.

usage: chat_wire_ratio.py PORT [CLIENTS] [MESSAGES] [--offer HEADER]

Starts nothing: point it at a running `chat-room --port PORT` (with its default compression, or
`--no-deflate` for the baseline). CLIENTS raw WebSocket clients (written here, so every frame's
size is seen) offer permessage-deflate (as Chromium does, unless --offer says otherwise), join
one room, and take turns sending MESSAGES chat lines of realistic lengths; then one more client
joins and receives the room's history. Every frame the server sends is counted: wire bytes
(frame header + payload as sent) against message bytes (payload after inflating). Prints one
`result …` line and the negotiated extension.
"""
import base64, json, os, random, socket, struct, sys, zlib

WORDS = ("the quick brown fox jumps over a lazy dog while we ship the release on friday and "
         "review the pull request about compression memory and latency budgets").split()


class Client:
    def __init__(self, port, offer):
        self.sock = socket.create_connection(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        request = (f"GET /v1/ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n")
        if offer:
            request += f"Sec-WebSocket-Extensions: {offer}\r\n"
        self.sock.sendall((request + "\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.sock.recv(65536)
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        assert " 101 " in lines[0], lines[0]
        self.extensions = ""
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "sec-websocket-extensions":
                self.extensions = value.strip()
        self.reset_each = "server_no_context_takeover" in self.extensions
        self.inflater = zlib.decompressobj(-15)
        self.wire = 0
        self.payload = 0
        self.compressed_messages = 0
        self.messages = 0
        self.lines = []

    def send_text(self, text):
        data = text.encode()
        mask = os.urandom(4)
        header = bytes([0x81])
        n = len(data)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 65536:
            header += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack("!Q", n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(header + mask + masked)

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError
            self.buf += chunk

    def read_message(self):
        parts, compressed, wire = [], False, 0
        while True:
            self._need(2)
            b0, b1 = self.buf[0], self.buf[1]
            n, off = b1 & 0x7F, 2
            if n == 126:
                self._need(4); n = struct.unpack("!H", self.buf[2:4])[0]; off = 4
            elif n == 127:
                self._need(10); n = struct.unpack("!Q", self.buf[2:10])[0]; off = 10
            self._need(off + n)
            payload, self.buf = self.buf[off:off + n], self.buf[off + n:]
            wire += off + n
            opcode = b0 & 0x0F
            if opcode >= 8:
                continue  # control frames: not messages
            if opcode != 0:
                compressed = bool(b0 & 0x40)
            parts.append(payload)
            if b0 & 0x80:
                break
        data = b"".join(parts)
        if compressed:
            data = self.inflater.decompress(data + b"\x00\x00\xff\xff")
            if self.reset_each:
                self.inflater = zlib.decompressobj(-15)
            self.compressed_messages += 1
        self.wire += wire
        self.payload += len(data)
        self.messages += 1
        text = data.decode()
        self.lines.extend(l for l in text.split("\n") if l)
        return text

    def read_until(self, predicate):
        while True:
            for i, line in enumerate(self.lines):
                if predicate(line):
                    del self.lines[: i + 1]
                    return line
            self.lines = []
            self.read_message()


def sentence(rng):
    return " ".join(rng.choice(WORDS) for _ in range(rng.choice((3, 6, 10, 18, 30))))


def main():
    args = [a for a in sys.argv[1:]]
    offer = "permessage-deflate; client_max_window_bits"
    if "--offer" in args:
        i = args.index("--offer"); offer = args[i + 1]; del args[i:i + 2]
    port = int(args[0])
    n_clients = int(args[1]) if len(args) > 1 else 5
    n_messages = int(args[2]) if len(args) > 2 else 200
    rng = random.Random(7)
    room = "lobby"
    clients = [Client(port, offer) for _ in range(n_clients)]
    for i, c in enumerate(clients):
        c.send_text(json.dumps({"type": "join", "room": room, "user": f"user{i}"}) + "\n")
        c.read_until(lambda l: '"joined"' in l or '"history"' in l)
    for m in range(n_messages):
        sender = clients[m % n_clients]
        text = sentence(rng)
        sender.send_text(json.dumps({"type": "message", "room": room, "text": text}) + "\n")
        for c in clients:
            c.read_until(lambda l, t=text: '"message"' in l and json.dumps(t)[1:-1] in l)
    late = Client(port, offer)
    late.send_text(json.dumps({"type": "join", "room": room, "user": "late"}) + "\n")
    late.read_until(lambda l: '"history"' in l)
    everyone = clients + [late]
    wire = sum(c.wire for c in everyone)
    payload = sum(c.payload for c in everyone)
    messages = sum(c.messages for c in everyone)
    compressed = sum(c.compressed_messages for c in everyone)
    print(f"extensions: {clients[0].extensions or '(none)'}")
    print(f"result server_to_client_messages={messages} compressed_messages={compressed} "
          f"payload_bytes={payload} wire_bytes={wire} wire_over_payload={wire / payload:.3f} "
          f"history_wire={late.wire} history_payload={late.payload}")


if __name__ == "__main__":
    main()
