"""An HTTP/3 load generator on aioquic's API, for bench/run.sh's h3-*-aioquic scenarios.

oha's HTTP/3 client (quinn) cannot complete a handshake with Debian's Caddy 2.6 (quic-go),
so to compare the two servers at all, both are loaded with this one in the same run. It
is far slower than oha (one Python core): every server gets the same request rate, and
CPU per request is read at that rate.

usage: h3load.py -z DURATION -c CONNECTIONS -p STREAMS [--server-name NAME] URL
Prints oha's JSON fields that bench/run.sh reads: summary.requestsPerSec,
summary.totalData, statusCodeDistribution, errorDistribution, latencyPercentiles.
"""

import argparse
import asyncio
import json
import ssl
import time
from urllib.parse import urlsplit

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamReset


class Loader(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.http = H3Connection(self._quic)
        self.waiting = {}

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            for s in self.waiting.values():
                if not s[2].done():
                    s[2].set_exception(ConnectionError("closed"))
            self.waiting.clear()
            return
        if isinstance(event, StreamReset):
            s = self.waiting.pop(event.stream_id, None)
            if s and not s[2].done():
                s[2].set_exception(ConnectionError("reset"))
            return
        for e in self.http.handle_event(event):
            s = self.waiting.get(getattr(e, "stream_id", None))
            if s is None:
                continue
            if isinstance(e, HeadersReceived) and s[0] is None:
                s[0] = int(dict(e.headers)[b":status"])
            elif isinstance(e, DataReceived):
                s[1] += len(e.data)
            if e.stream_ended:
                del self.waiting[e.stream_id]
                s[2].set_result((s[0], s[1]))

    async def get(self, headers):
        sid = self._quic.get_next_available_stream_id()
        done = asyncio.get_running_loop().create_future()
        self.waiting[sid] = [None, 0, done]
        self.http.send_headers(sid, headers, end_stream=True)
        self.transmit()
        return await done


async def worker(conn, headers, until, stats):
    while time.monotonic() < until:
        t = time.monotonic()
        try:
            status, n = await conn.get(headers)
        except Exception as e:
            stats["errors"][type(e).__name__] = stats["errors"].get(type(e).__name__, 0) + 1
            return
        stats["lat"].append(time.monotonic() - t)
        stats["codes"][status] = stats["codes"].get(status, 0) + 1
        stats["bytes"] += n


async def connection(args, host, port, headers, until, stats):
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    cfg.verify_mode = ssl.CERT_NONE
    cfg.server_name = args.server_name
    try:
        async with connect(host, port, configuration=cfg, create_protocol=Loader) as conn:
            await asyncio.gather(*(worker(conn, headers, until, stats) for _ in range(args.p)))
    except Exception as e:
        stats["errors"][type(e).__name__] = stats["errors"].get(type(e).__name__, 0) + 1


def seconds(text):
    """oha's durations: 8s, 500ms, 2m, or a bare number of seconds."""
    for suffix, scale in (("ms", 0.001), ("s", 1), ("m", 60)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * scale
    return float(text)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-z", type=seconds, required=True)
    ap.add_argument("-c", type=int, default=1)
    ap.add_argument("-p", type=int, default=1)
    ap.add_argument("--server-name", default="localhost")
    ap.add_argument("url")
    args = ap.parse_args()
    u = urlsplit(args.url)
    headers = [
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":authority", u.netloc.encode()),
        (b":path", (u.path or "/").encode()),
        (b"user-agent", b"h3load"),
    ]
    stats = {"lat": [], "codes": {}, "errors": {}, "bytes": 0}
    start = time.monotonic()
    until = start + args.z
    await asyncio.gather(
        *(connection(args, u.hostname, u.port, headers, until, stats) for _ in range(args.c))
    )
    took = time.monotonic() - start
    lat = sorted(stats["lat"])
    pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else None
    print(json.dumps({
        "summary": {
            "requestsPerSec": len(lat) / took if took else 0,
            "totalData": stats["bytes"],
        },
        "statusCodeDistribution": {str(k): v for k, v in stats["codes"].items()},
        "errorDistribution": stats["errors"],
        "latencyPercentiles": {"p50": pct(0.5), "p99": pct(0.99)},
    }))


asyncio.run(main())
