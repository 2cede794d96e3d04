#!/usr/bin/env python3
"""Scrapes a /metrics URL and parses it with prometheus_client's parser (PyPI
prometheus-client); prints one JSON line: {"status": N, "samples": {"name{k=v,...}": value}}.
A body that does not parse exits 2.

usage: metrics_scrape.py URL [KEY]
"""
import json
import sys
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

request = urllib.request.Request(sys.argv[1])
if len(sys.argv) > 2:
    request.add_header("Authorization", "Bearer " + sys.argv[2])
try:
    with urllib.request.urlopen(request, timeout=60) as response:
        status, body, ctype = response.status, response.read().decode("utf-8"), response.headers.get("Content-Type")
except urllib.error.HTTPError as error:
    print(json.dumps({"status": error.code, "samples": {}, "body": error.read().decode("utf-8", "replace")}))
    sys.exit(0)
samples = {}
try:
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
except Exception as error:  # the parser's ValueError and friends: the test fails
    print(f"unparsable metrics: {error}\n{body}", file=sys.stderr)
    sys.exit(2)
print(json.dumps({"status": status, "contentType": ctype, "samples": samples}))
