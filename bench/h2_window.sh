#!/usr/bin/env bash
# The HTTP/2 flow-control memory attack (bench/h2_window.py) against gatehouse and nginx in
# one run, over TLS with ALPN h2 (each server's default TLS settings, one self-signed
# certificate), on loopback: servers x CONNS x MODES, a fresh server for each case. Prints
# a Markdown table of each server's peak resident memory (the sum over its processes).
#
# Inputs (environment): SERVERS ("gatehouse nginx"), GATEHOUSE (default target/release/gatehouse), NGINX, CONNS ("8 100"),
# MODES ("zero trickle"), STREAMS (256), DURATION (seconds per case, 15), RSS_CAP (MiB at
# which a case gives up, 4096), GATEHOUSE_TOML (lines added to gatehouse's config).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
GATEHOUSE=${GATEHOUSE:-$ROOT/target/release/gatehouse}
NGINX=${NGINX-$(command -v nginx || true)}
SERVERS=${SERVERS:-gatehouse nginx}
CONNS=${CONNS:-8 100}
MODES=${MODES:-zero trickle}
STREAMS=${STREAMS:-256}
DURATION=${DURATION:-15}
RSS_CAP=${RSS_CAP:-4096}
GATEHOUSE_TOML=${GATEHOUSE_TOML:-}
TLS_GH=18481 ADMIN_GH=18491 PORT_GH=18480 TLS_NGINX=18482

case " $SERVERS " in *" gatehouse "*) [ -x "$GATEHOUSE" ] || { echo "no gatehouse binary at $GATEHOUSE (cargo build --release -p gatehouse)" >&2; exit 1; } ;; esac
[ -x "$NGINX" ] || { echo "nginx not found (apt-get install -y nginx)" >&2; exit 1; }
python3 -c 'import ssl' || exit 1

WORK=$(mktemp -d /tmp/gatehouse-h2window.XXXXXX)
chmod 755 "$WORK"
PIDS=()
stop() {
  local p
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -TERM "$p" 2> /dev/null || true; done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2> /dev/null || true; done
  PIDS=()
}
trap 'stop; rm -rf "$WORK"' EXIT

mkdir -p "$WORK/www"
head -c $((64 * 1024 * 1024)) /dev/urandom > "$WORK/www/big.bin"
chmod -R a+rX "$WORK/www"
CERT="$WORK/cert.pem" KEY="$WORK/key.pem"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout "$KEY" -out "$CERT" 2> /dev/null
chmod a+r "$CERT" "$KEY"

wait_tls() {
  local i
  for i in $(seq 1 200); do
    curl -sk -o /dev/null "https://127.0.0.1:$1/" && return 0
    sleep 0.05
  done
  echo "server on $1 never answered" >&2
  return 1
}

start_gatehouse() {
  cat > "$WORK/gatehouse.toml" <<EOF
root = "$WORK/www"
listen = "127.0.0.1:$PORT_GH"
admin_listen = "127.0.0.1:$ADMIN_GH"
log_level = "warn"
[tls]
listen = "127.0.0.1:$TLS_GH"
[[tls.certs]]
cert = "$CERT"
key = "$KEY"
EOF
  [ -n "$GATEHOUSE_TOML" ] && printf '%b\n' "$GATEHOUSE_TOML" >> "$WORK/gatehouse.toml"
  env -i PATH="$PATH" HOME="$HOME" "$GATEHOUSE" --config "$WORK/gatehouse.toml" 2>> "$WORK/gatehouse.log" &
  PIDS=($!)
  wait_tls "$TLS_GH"
}

start_nginx() {
  mkdir -p "$WORK/nginx"
  local user_line=""
  [ "$(id -u)" = 0 ] && user_line="user root;"
  # As bench/run.sh runs it: two workers, sendfile on, TLS with `listen ... ssl http2`.
  cat > "$WORK/nginx.conf" <<EOF
$user_line
worker_processes 2;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_timeout 65;
  client_body_temp_path $WORK/nginx/body;
  proxy_temp_path $WORK/nginx/proxy;
  fastcgi_temp_path $WORK/nginx/fastcgi;
  uwsgi_temp_path $WORK/nginx/uwsgi;
  scgi_temp_path $WORK/nginx/scgi;
  default_type application/octet-stream;
  server {
    listen 127.0.0.1:$TLS_NGINX ssl http2;
    ssl_certificate $CERT;
    ssl_certificate_key $KEY;
    ssl_protocols TLSv1.2 TLSv1.3;
    root $WORK/www;
  }
}
EOF
  "$NGINX" -c "$WORK/nginx.conf" -e "$WORK/nginx/error.log" 2>> "$WORK/nginx.log" &
  PIDS=($!)
  wait_tls "$TLS_NGINX"
}

ROWS="$WORK/rows.jsonl"
: > "$ROWS"
for server in $SERVERS; do
  for conns in $CONNS; do
    for mode in $MODES; do
      if [ "$server" = gatehouse ]; then start_gatehouse; port=$TLS_GH; else start_nginx; port=$TLS_NGINX; fi
      sleep 0.3
      pids=$(for p in "${PIDS[@]}"; do echo "$p"; pgrep -P "$p" || true; done | paste -sd, -)
      echo "$server, $conns connections, $mode ..." >&2
      python3 "$ROOT/bench/h2_window.py" --port "$port" --tls --path /big.bin --conns "$conns" \
        --streams "$STREAMS" --mode "$mode" --duration "$DURATION" --pid "$pids" \
        --rss-cap "$RSS_CAP" | sed "s/^{/{\"server\": \"$server\", /" | tee -a "$ROWS" >&2
      stop
    done
  done
done

python3 - "$ROWS" "$STREAMS" "$DURATION" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"HTTP/2 over TLS, {sys.argv[2]} GETs of a 64 MiB file per connection with "
      f"SETTINGS_INITIAL_WINDOW_SIZE = 0, {sys.argv[3]} s per case; peak RSS summed over the "
      "server's processes (MiB). nginx refuses the streams past its 128th on a connection "
      "(RST_STREAM REFUSED_STREAM, counted as reset).\n")
print("| server | connections | mode | RSS before | peak RSS | growth | answered | reset by server | conns closed by server |")
print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
for r in rows:
    peak = f'{r["rss_peak_kib"] / 1024:.1f}' + (" (capped)" if r["capped"] else "")
    print(f'| {r["server"]} | {r["conns"]} | {r["mode"]} | {r["rss_before_kib"] / 1024:.1f} | {peak} | '
          f'{(r["rss_peak_kib"] - r["rss_before_kib"]) / 1024:.1f} | {r["answered"]} | {r["reset"]} | '
          f'{r["conns_closed_by_server"]} |')
PY
