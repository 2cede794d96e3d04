#!/usr/bin/env python3
"""One HTTP request with urllib (a client nobody here wrote); prints one JSON line:
{"status": N, "body": "<response body>", "headers": {...}}.

usage: http_request.py METHOD URL [--key KEY] [--body TEXT] [--body-size N]
  --key KEY       sends Authorization: Bearer KEY
  --body TEXT     sends TEXT (UTF-8) as an application/json body
  --body-size N   sends a JSON body of N bytes ({"user":"u","text":"xxx…"})
"""
import argparse
import json
import sys
import urllib.error
import urllib.request

parser = argparse.ArgumentParser()
parser.add_argument("method")
parser.add_argument("url")
parser.add_argument("--key")
parser.add_argument("--body")
parser.add_argument("--body-size", type=int)
args = parser.parse_args()

data = None
if args.body is not None:
    data = args.body.encode("utf-8")
elif args.body_size is not None:
    head = b'{"user":"u","text":"'
    tail = b'"}'
    data = head + b"x" * (args.body_size - len(head) - len(tail)) + tail
request = urllib.request.Request(args.url, data=data, method=args.method)
if data is not None:
    request.add_header("Content-Type", "application/json")
if args.key:
    request.add_header("Authorization", "Bearer " + args.key)
try:
    with urllib.request.urlopen(request, timeout=60) as response:
        status, body, headers = response.status, response.read(), dict(response.headers)
except urllib.error.HTTPError as error:
    status, body, headers = error.code, error.read(), dict(error.headers)
except (ConnectionError, urllib.error.URLError) as error:
    # The server may answer 413 and close before reading the whole body: the answer can be lost
    # to a reset. Report it; the test decides.
    print(json.dumps({"status": 0, "body": "", "error": str(error), "headers": {}}))
    sys.exit(0)
print(json.dumps({"status": status, "body": body.decode("utf-8", "replace"), "headers": headers}))
