#!/usr/bin/env python3
"""Prints an HS256 JWT (standard library only): mint_token.py SECRET SUB NAME LIFETIME_SECONDS.

The stand-in for a backend's token endpoint in the chat tests (--token-command, the browser's
refresh hook). exp is now + LIFETIME_SECONDS (Unix seconds, rounded down).
"""
import base64
import hashlib
import hmac
import json
import sys
import time


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint(secret, sub, name, lifetime):
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = {"sub": sub, "name": name, "iat": int(time.time()), "exp": int(time.time() + lifetime)}
    payload = b64(json.dumps(claims, separators=(",", ":")).encode())
    signing_input = f"{header}.{payload}".encode()
    signature = b64(hmac.new(secret.encode(), signing_input, hashlib.sha256).digest())
    return f"{header}.{payload}.{signature}"


if __name__ == "__main__":
    print(mint(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])))
