#!/usr/bin/env python3
"""Holds N keep-alive connections open to a server, mostly idle, for the idle-1000
scenario of bench/run.sh: each connection makes one request, waits until told to stop
(a file appears), then makes one more. Prints how many connections were held and how
many failed (refused, closed by the server, a wrong answer) as JSON."""
import asyncio
import json
import os
import resource
import sys

host, port, n, path, stop_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, n + 256)), hard))
REQ = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()


async def one_request(r, w):
    w.write(REQ)
    await w.drain()
    head = await r.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await r.readexactly(length)
    return status == 200


async def hold(i, opened):
    try:
        r, w = await asyncio.open_connection(host, port)
        ok = await one_request(r, w)
        opened.append(1)
        while not os.path.exists(stop_file):
            await asyncio.sleep(0.2)
        ok = ok and await one_request(r, w)
        w.close()
        return ok
    except Exception:
        return False


async def main():
    opened = []
    results = await asyncio.gather(*(hold(i, opened) for i in range(n)))
    print(json.dumps({"held": len(opened), "failed": results.count(False)}))


asyncio.run(main())
