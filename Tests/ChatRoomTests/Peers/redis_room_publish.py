#!/usr/bin/env python3
"""Publishes chat `message` events into a chat-room room through Redis with redis-py, following
docs/redis-envelope.md: PUBLISH <prefix>topic:room:<room> with the envelope
[version 1, flags (1 = binary, 2 = may be compressed), 16-byte node id (all zero: from no node,
delivered by every server)] + payload (one chat event line, UTF-8 text).

usage: redis_room_publish.py REDIS_URL ROOM COUNT [PREFIX]
Prints the number of subscribers each PUBLISH reached, one per line, then DONE.
"""
import json
import sys

import redis

url, room, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
prefix = sys.argv[4] if len(sys.argv) > 4 else "switchboard:"
client = redis.Redis.from_url(url)
channel = f"{prefix}topic:room:{room}"
header = bytes([1, 0]) + bytes(16)
for i in range(1, count + 1):
    event = {"type": "message", "id": 900000 + i, "room": room, "user": "python", "text": f"from redis-py {i}", "ts": 0}
    payload = (json.dumps(event, separators=(",", ":")) + "\n").encode("utf-8")
    print(client.publish(channel, header + payload), flush=True)
print("DONE", flush=True)
