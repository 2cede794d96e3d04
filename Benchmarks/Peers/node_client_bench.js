#!/usr/bin/env node
// Client benchmark peer: Node.js with the `ws` module (Debian's node-ws), the same modes, flags
// and output line as Switchboard's `client-bench`.
//
// - pipelined: against an echo server, sends --size-byte lines (newline included), each as one
//   text message, keeping --window of them in flight (after each message received, sends while
//   fewer than --window lines are unanswered).
// - reply: against an echo server, the loop applications write: --window lines sent first, then
//   one reply sent from the message handler for every line received. Each line starts with its
//   send time (16 hex digits of process.hrtime nanoseconds); p50_us and p99_us of the round trips
//   are added to the result.
// - stream: against a server that streams lines (line-streamer), only receives.
//
// Received messages are split into lines on "\n" with a carry-over buffer (a line may span
// messages), like Switchboard's `lines()`. Counts lines received during --duration seconds after
// --warmup and prints `result mode=... lines_per_s=... lines=... size=... window=... cpu=...%`.
//
// Settings changed from the module's defaults: perMessageDeflate false (a client offers it by
// default; the Switchboard client does not compress).
'use strict';

let WebSocket;
try {
  WebSocket = require('ws');
} catch (e) {
  // Debian's node-ws lives here; Node from other sources does not search /usr/share/nodejs.
  WebSocket = require('/usr/share/nodejs/ws');
}

function parseArgs(argv) {
  const opt = { mode: 'pipelined', host: '127.0.0.1', port: 9001, path: '/', size: 60, window: 64, duration: 5, warmup: 1 };
  const numeric = new Set(['port', 'size', 'window', 'duration', 'warmup']);
  for (let i = 0; i < argv.length; i++) {
    const m = /^--(.+)$/.exec(argv[i]);
    if (!m || !(m[1] in opt) || i + 1 >= argv.length) usage();
    const v = argv[++i];
    opt[m[1]] = numeric.has(m[1]) ? Number(v) : v;
  }
  if (!['pipelined', 'reply', 'stream'].includes(opt.mode) || !(opt.size >= (opt.mode === 'reply' ? 18 : 2)) || !(opt.window >= 1) ||
      !(opt.duration > 0) || !(opt.warmup >= 0)) usage();
  return opt;
}

function usage() {
  process.stderr.write('usage: node_client_bench.js [--mode pipelined|reply|stream] [--host 127.0.0.1] [--port 9001] [--path /]\n' +
                       '                            [--size 60] [--window 64] [--duration 5] [--warmup 1]\n');
  process.exit(2);
}

function cpuSeconds() {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

const opt = parseArgs(process.argv.slice(2));
const pipelined = opt.mode === 'pipelined';
const reply = opt.mode === 'reply';
const line = 'x'.repeat(opt.size - 1) + '\n';
const padding = 'x'.repeat(opt.size - 17) + '\n';
const latencies = [];
function stamped() {
  return process.hrtime.bigint().toString(16).padStart(16, '0') + padding;
}
const ws = new WebSocket(`ws://${opt.host}:${opt.port}${opt.path}`, { perMessageDeflate: false });

let inFlight = 0;
let carry = '';
let measured = 0;
let cpuStart = null;
let measureFrom = 0;
let measureUntil = 0;
let finished = false;

function fill() {
  while (inFlight < opt.window) {
    ws.send(line);
    inFlight++;
  }
}

ws.on('open', () => {
  measureFrom = performance.now() + opt.warmup * 1000;
  measureUntil = measureFrom + opt.duration * 1000;
  if (pipelined) fill();
  if (reply) for (let i = 0; i < opt.window; i++) ws.send(stamped());
});

ws.on('message', (data) => {
  if (finished) return;
  const parts = (carry + data.toString()).split('\n');
  carry = parts.pop();
  let lines = 0;
  for (const p of parts) if (p.length > 0) lines++;
  const now = performance.now();
  if (now >= measureUntil) {
    finished = true;
    const cpu = cpuSeconds() - (cpuStart === null ? cpuSeconds() : cpuStart);
    let extra = '';
    if (reply) {
      latencies.sort((a, b) => a - b);
      const pct = (p) => latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))] / 1000 : 0;
      extra = ` p50_us=${pct(0.5).toFixed(0)} p99_us=${pct(0.99).toFixed(0)}`;
    }
    process.stdout.write(`result mode=${opt.mode} lines_per_s=${(measured / opt.duration).toFixed(0)} lines=${measured} ` +
                         `size=${opt.size} window=${pipelined || reply ? opt.window : 0} cpu=${(100 * cpu / opt.duration).toFixed(0)}%${extra}\n`);
    ws.close();
    // Bounded close handshake, as the other clients (2 s).
    setTimeout(() => { ws.terminate(); }, 2000).unref();
    return;
  }
  if (now >= measureFrom) {
    if (cpuStart === null) cpuStart = cpuSeconds();
    measured += lines;
  }
  if (pipelined) {
    inFlight -= lines;
    fill();
  }
  if (reply) {
    const t = process.hrtime.bigint();
    for (const p of parts) {
      if (p.length === 0) continue;
      if (now >= measureFrom) {
        const sent = BigInt('0x' + p.slice(0, 16));
        latencies.push(Number(t - sent));
      }
      ws.send(stamped());
    }
  }
});

ws.on('error', (err) => {
  process.stderr.write(`node_client_bench: ${err.message}\n`);
  process.exitCode = 1;
});

ws.on('close', () => {
  if (!finished) {
    process.stderr.write('node_client_bench: the connection ended early\n');
    process.exitCode = 1;
  }
});
