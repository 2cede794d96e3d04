#!/usr/bin/env python3
"""A scripted external agent for agent-stream's --agent-command bridge (used by the tests).

Reads the prompt line {"type":"message","data":{"content","model"}} from stdin and answers
with JSON event lines on stdout. The prompt selects the scenario:
  "no result"  -> emits one partial, exits with status 3 without a result line
  "sleep"      -> emits a system event with its pid, then sleeps 600 s (to be cancelled; far
                  longer than the test waits for it to die)
  "sleep with a child" -> the same after starting `sleep 600`, which shares its stdout
  "permission" -> emits a permission_request, waits for the permission line on stdin
  "escapes"    -> a turn whose text, tool name and result carry terminal control sequences
  anything else -> a full turn; the tool_use line is written in 5-byte pieces with flushes
"""
import json
import os
import signal
import sys
import time

out = sys.stdout.buffer


def on_sigterm(signum, frame):
    sys.stderr.write("fake agent got SIGTERM\n")
    sys.stderr.flush()
    sys.exit(0)


# A SIGTERM (the server's first step in ending a turn) is reported, so a test can tell it
# arrived rather than the SIGKILL that follows.
signal.signal(signal.SIGTERM, on_sigterm)


def emit(obj):
    out.write((json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8"))
    out.flush()


def emit_split(obj, piece=5):
    data = (json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8")
    for i in range(0, len(data), piece):  # splits multi-byte characters too
        out.write(data[i:i + piece])
        out.flush()
        time.sleep(0.005)


line = sys.stdin.readline()
prompt = json.loads(line)["data"]["content"]
sys.stderr.write("fake agent got prompt %r\n" % prompt)
sys.stderr.flush()

if prompt == "no result":
    emit({"type": "partial", "data": {"text": "about to fail"}})
    sys.exit(3)

if prompt == "sleep with a child":
    # A child that shares our stdout and outlives us (our SIGTERM handler exits without it).
    import subprocess
    child = subprocess.Popen(["sleep", "600"])
    emit({"type": "system", "data": {"message": "pid %d child %d" % (os.getpid(), child.pid)}})
    time.sleep(600)
    sys.exit(0)

if prompt == "sleep":
    emit({"type": "system", "data": {"message": "pid %d" % os.getpid()}})
    time.sleep(600)
    emit({"type": "partial", "data": {"text": "should never be seen"}})
    sys.exit(0)

if prompt.startswith("flood "):
    # N partial events of about 1 KB each, as fast as the pipe takes them.
    text = "x" * 1000
    for _ in range(int(prompt.split()[1])):
        emit({"type": "partial", "data": {"text": text}})
    emit({"type": "result", "data": {"num_turns": 1, "duration_ms": 5, "total_cost_usd": 0, "subtype": "success"}})
    sys.exit(0)

if prompt == "escapes":
    emit({"type": "partial", "data": {"text": "\x1b[2J\x1b]0;pwned\x07 hidden\rfake: line \u009b1m"}})
    emit({"type": "partial", "data": {"text": " tab\there\nsecond line"}})
    emit({"type": "tool_use", "data": {"tool_use_id": "esc_1", "name": "\x1b[31mrm", "input": {}}})
    emit({"type": "tool_result", "data": {"tool_use_id": "esc_1", "content": "\u202etxt.exe", "is_error": False}})
    emit({"type": "result", "data": {"num_turns": 1, "duration_ms": 5, "total_cost_usd": 0, "subtype": "success"}})
    sys.exit(0)

if prompt == "permission":
    emit({"type": "permission_request", "data": {"tool_use_id": "ext_1", "name": "rm", "input": {"path": "/tmp/x"}}})
    answer = json.loads(sys.stdin.readline())
    emit({"type": "tool_result", "data": {"tool_use_id": "ext_1", "content": answer["data"]["decision"], "is_error": False}})
    emit({"type": "result", "data": {"num_turns": 1, "duration_ms": 5, "total_cost_usd": 0, "subtype": "success"}})
    sys.exit(0)

emit({"type": "partial", "data": {"text": "Echo:"}})
time.sleep(0.02)
emit({"type": "partial", "data": {"text": " " + prompt}})
time.sleep(0.02)
out.write(b"this line is not JSON\n")
out.flush()
emit_split({"type": "tool_use", "data": {"tool_use_id": "ext_tool", "name": "grep",
                                         "input": {"pattern": "a\"b\\c", "n": 3, "unicode": "日本語 ✓"}}})
emit({"type": "tool_result", "data": {"tool_use_id": "ext_tool", "content": "3 matches", "is_error": False}})
emit({"type": "assistant", "data": {"text": "Echo: " + prompt, "model": "fake-1", "stop_reason": "end_turn"}})
emit({"type": "response", "data": {"content": "Echo: " + prompt, "tokens_used": 7}})
emit_split({"type": "result", "data": {"num_turns": 1, "duration_ms": 42, "total_cost_usd": 0.001,
                                       "subtype": "success"}}, piece=3)
