#!/usr/bin/env python3
"""Upstream requests for one cold key under concurrent load: gatehouse's [routes.cache]
against nginx's proxy_cache with proxy_cache_lock on.

A backend (here, asyncio) answers every request after DELAY with max-age=600 and counts
what it is asked. Each server in turn gets N concurrent requests for a key it has never
seen; the figure is how many of them reached the backend (1 is full coalescing).

  python3 bench/coalesce.py GATEHOUSE_BINARY [NGINX_BINARY] [N] > coalesce.json
"""
import asyncio, json, os, shutil, subprocess, sys, tempfile, time

GATEHOUSE = sys.argv[1]
NGINX = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else None
N = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
DELAY = 0.3
PORT_BACKEND, PORT_GH, ADMIN_GH, PORT_NGINX = 18384, 18381, 18391, 18382


class Backend:
    def __init__(self):
        self.asked = 0

    async def serve(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not head:
                    break
                self.asked += 1
                await asyncio.sleep(DELAY)
                body = b"x" * 1024
                writer.write(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\n"
                             b"Content-Type: application/octet-stream\r\n"
                             b"Content-Length: %d\r\n\r\n" % len(body) + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def one(port, path):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n".encode())
    await w.drain()
    data = await r.read()
    w.close()
    return data.startswith(b"HTTP/1.1 200") and data.endswith(b"x" * 1024)


async def burst(port, path):
    return sum(await asyncio.gather(*(one(port, path) for _ in range(N))))


async def wait_port(port):
    for _ in range(200):
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return True
        except OSError:
            await asyncio.sleep(0.05)
    return False


def start_gatehouse(work):
    conf = os.path.join(work, "gatehouse.toml")
    with open(conf, "w") as f:
        f.write(f'root = "{work}"\nlisten = "127.0.0.1:{PORT_GH}"\n'
                f'admin_listen = "127.0.0.1:{ADMIN_GH}"\nlog_level = "warn"\n'
                f'[[routes]]\n[routes.proxy]\nupstreams = ["http://127.0.0.1:{PORT_BACKEND}"]\n'
                f'[routes.cache]\n')
    return subprocess.Popen([GATEHOUSE, "--config", conf], stderr=open(os.path.join(work, "gh.log"), "w")), PORT_GH


def start_nginx(work):
    d = os.path.join(work, "nginx")
    os.makedirs(d, exist_ok=True)
    user = "user root;" if os.getuid() == 0 else ""
    conf = os.path.join(work, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""{user}
worker_processes 2; daemon off; pid {d}/nginx.pid; error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi;
  uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
  proxy_cache_path {d}/cache levels=1:2 keys_zone=bench:16m use_temp_path=off;
  upstream backend {{ server 127.0.0.1:{PORT_BACKEND}; keepalive 128; }}
  server {{
    listen 127.0.0.1:{PORT_NGINX};
    location / {{ proxy_pass http://backend; proxy_http_version 1.1;
      proxy_set_header Connection ""; proxy_cache bench; proxy_cache_lock on; }}
  }}
}}
""")
    return subprocess.Popen([NGINX, "-c", conf, "-e", f"{d}/error.log"]), PORT_NGINX


async def main():
    backend = Backend()
    server = await asyncio.start_server(backend.serve, "127.0.0.1", PORT_BACKEND, backlog=4096)
    rows = []
    work = tempfile.mkdtemp()
    try:
        for name, start in [("gatehouse", start_gatehouse), ("nginx", start_nginx)]:
            if name == "nginx" and not NGINX:
                continue
            proc, port = start(work)
            try:
                if not await wait_port(port):
                    rows.append({"server": name, "error": "did not start"})
                    continue
                before = backend.asked
                t0 = time.monotonic()
                ok = await burst(port, f"/cold-{name}")
                rows.append({"server": name, "requests": N, "ok": ok,
                             "upstream_requests": backend.asked - before,
                             "seconds": round(time.monotonic() - t0, 3)})
            finally:
                proc.terminate()
                proc.wait()
    finally:
        server.close()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(rows))


asyncio.run(main())
