#!/usr/bin/env bash
# Benchmarks gatehouse against nginx and Caddy on this machine, in one run: same files, same
# load, same settings. See docs/src/benchmarks.md for what each figure means.
#
# Inputs (environment): GATEHOUSE, GATEHOUSE_BASE, NGINX, CADDY, OHA, DURATION, CONNECTIONS,
# WARMUP, SCENARIOS, OUT_DIR, RUNTIME, BASE_RUNTIME, GATEHOUSE_TOML, BASE_TOML, METRICS,
# BASE_METRICS, ROUNDS, FLOOR, BACKEND_NGINX (proxy-1k's backend; nginx by default).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# conn-10k holds 10,000 connections: every server started from here (and oha) may open as
# many files as the hard limit allows.
ulimit -n "$(ulimit -Hn)" 2> /dev/null || true
GATEHOUSE=${GATEHOUSE:-$ROOT/target/release/gatehouse}
GATEHOUSE_BASE=${GATEHOUSE_BASE:-}
NGINX=${NGINX-$(command -v nginx || true)}
# proxy-1k's backend is an nginx whether or not nginx is measured (NGINX= skips only that).
BACKEND_NGINX=${BACKEND_NGINX:-${NGINX:-$(command -v nginx || true)}}
CADDY=${CADDY-$(command -v caddy || true)}
OHA=${OHA:-$(command -v oha || echo "$HOME/.cargo/bin/oha")}
DURATION=${DURATION:-15s}
CONNECTIONS=${CONNECTIONS:-64}
WARMUP=${WARMUP:-2s}
# ROUNDS > 1: each scenario is run that many times, the servers taking turns to go first,
# and the summary gives each server's median and its median ratio to nginx's same round
# (this machine's figures drift more between minutes than between servers in one minute).
ROUNDS=${ROUNDS:-1}
# FLOOR=1: also bench bench/floor.c (built here with cc), a server that does one read and one
# write per request and nothing else, as the lower bound for static-1k, text-gzip and cache-1k; and
# hyper-floor, hyper alone answering with the file from memory (gateway/examples/bare_hyper.rs,
# built here with cargo; HYPER_FLOOR names another binary), in rules-1k too with the fields
# that route's rules add, fixed: the floor under issue 32's figure; in cache-1k, with the
# fields a hit sends (the backend's, Via and Age): the floor under a hit; and in https-1k, h2-1k,
# h3-1k and h3-1m, hyper over rustls and h3 over quinn (gateway/examples/bare_tls.rs;
# TLS_FLOOR names another binary), the floor under h3-1k ÷ h2-1k.
FLOOR=${FLOOR:-}
HYPER_FLOOR=${HYPER_FLOOR:-$ROOT/target/release/examples/bare_hyper}
TLS_FLOOR=${TLS_FLOOR:-$ROOT/target/release/examples/bare_tls}
SCENARIOS=${SCENARIOS:-static-1k,static-1m,text-gzip,proxy-1k,cache-1k,cache-cold,https-1k,h2-1k,h3-1k,h3-1k-aioquic,https-1m,h3-1m,log-1k,auth-basic-1k,rules-1k,redirect,idle-1000,files-10k,notfound,tls-handshake,conn-10k}
# files-10k: 10,000 distinct 1 KiB files, a random one per request (after a pass that
# touches each), every server's open-file cache large enough for all.
# rules-1k: static-1k's route with three response header rules, CORS and request IDs,
# asked with an Origin it allows; redirect: a path answered with a 301 (both against nginx
# only; with BASE_TOML set, gatehouse-base runs that route instead: the bare one, say).
# h3-1k, h3-1m: HTTP/3 over QUIC (oha built with its http3 feature), a quarter of the
# connections with four streams on each, as h2-1k; nginx 1.22 has no HTTP/3 and is skipped.
# h3-1k-aioquic: h3-1k loaded by bench/h3load.py (aioquic) instead of oha, for gatehouse
# and Caddy: oha cannot reach Caddy's HTTP/3. One Python core is the bottleneck, so every
# server gets the same (low) request rate.
# tls-handshake: a new TLS connection per request, from HANDSHAKE_CONNECTIONS clients.
export HANDSHAKE_CONNECTIONS=${HANDSHAKE_CONNECTIONS:-32}
# conn-10k: CONN10K_CONNECTIONS keep-alive connections making CONN10K_RATE requests a
# second in all, with the open-files limit raised to the hard limit for every server.
export CONN10K_CONNECTIONS=${CONN10K_CONNECTIONS:-10000}
export CONN10K_RATE=${CONN10K_RATE:-20000}
# idle-1000: IDLE_CONNECTIONS held open and mostly idle (one request at the start, one at
# the end), beside IDLE_ACTIVE connections making IDLE_RATE requests a second in all.
IDLE_CONNECTIONS=${IDLE_CONNECTIONS:-900}
IDLE_ACTIVE=${IDLE_ACTIVE:-100}
IDLE_RATE=${IDLE_RATE:-3000}
OUT_DIR=${OUT_DIR:-$ROOT/bench/out}
# Extra settings for gatehouse (RUNTIME: per-core or shared; *_TOML: lines added to its config).
RUNTIME=${RUNTIME:-}
BASE_RUNTIME=${BASE_RUNTIME:-}
# Metrics (on by default in gatehouse): METRICS=off turns them off for gatehouse; a
# BASE_METRICS other than METRICS benches gatehouse-base that way too, for their cost.
METRICS=${METRICS:-on}
BASE_METRICS=${BASE_METRICS:-$METRICS}
# By default gatehouse runs with the settings that match nginx's here: open_file_cache_valid 1s
# is `strict = false, valid = "1s"`. Set GATEHOUSE_TOML= (empty) for the strict default.
NGINX_EQUIVALENT='[[routes]]\n[routes.static.open_file_cache]\nstrict = false\nvalid = "1s"'
GATEHOUSE_TOML=${GATEHOUSE_TOML-$NGINX_EQUIVALENT}
BASE_TOML=${BASE_TOML-$GATEHOUSE_TOML}
BASE_TOML_SET=0
[ -n "${BASE_TOML+x}" ] && [ "$BASE_TOML" != "$GATEHOUSE_TOML" ] && BASE_TOML_SET=1

PORT_GH=18181 ADMIN_GH=18191 PORT_NGINX=18182 PORT_CADDY=18183 PORT_BACKEND=18184 PORT_FLOOR=18185
# TLS scenarios: each server also listens with TLS, on these, with one self-signed certificate.
TLS_GH=18281 TLS_NGINX=18282 TLS_CADDY=18283
# proxy-1k: every proxy under test forwards to one nginx serving the files (its CPU is not
# counted), over keep-alive connections.
PROXY_TOML="[[routes]]\n[routes.proxy]\nupstreams = [\"http://127.0.0.1:$PORT_BACKEND\"]"
# cache-1k, cache-cold: the proxy behind a response cache large enough for cache-cold's
# 50,000 keys; the backend marks every response max-age=600 (nginx's `expires 10m`).
CACHE_TOML="$PROXY_TOML\n[routes.cache]\nmax_bytes = 268435456"
BACKEND_PID=
# Per scenario (run_server): files-10k and notfound need a cache for more than 10,000
# names, conn-10k more connections than 8,192 a worker could be handed.
NGINX_WORKER_CONNECTIONS=8192 NGINX_OPEN_FILES=10000

mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
WORK=$(mktemp -d /tmp/gatehouse-bench.XXXXXX)
chmod 755 "$WORK"
# auth-basic-1k: user "bench", password "bench", as `htpasswd -B` makes it (bcrypt, cost 5).
printf '%s\n' 'bench:$2b$05$LVWtHYiEzELB4E7QnN/Ma.0n2dhiP5pUXGlEp0MWykjWAb9YlWGse' > "$WORK/htpasswd"
AUTH_TOML="$NGINX_EQUIVALENT\n[routes.auth]\nhtpasswd = \"$WORK/htpasswd\"\nrealm = \"bench\""
# log-1k: the static route of the nginx-equivalent settings, with a combined access log.
LOG_TOML="$NGINX_EQUIVALENT\n[routes.access_log]\npath = \"$WORK/gatehouse-access.log\"\nformat = \"combined\""
# rules-1k: the static route with three response header rules, CORS for the origin the
# requests come from, and request IDs (issue 32's figure); nginx's is written by hand.
RULES_TOML="$NGINX_EQUIVALENT\n[[routes.headers.response]]\nset = { \"X-Frame-Options\" = \"DENY\", \"X-Content-Type-Options\" = \"nosniff\", \"Referrer-Policy\" = \"no-referrer\" }\n[routes.cors]\nallow_origins = [\"https://app.example.test\"]\nallow_credentials = true\n[routes.request_id]"
# redirect: /old answered with a 301 to /1k.bin.
REDIRECT_TOML="$NGINX_EQUIVALENT\n[[routes.redirects]]\nexact = \"/old\"\nto = \"/1k.bin\""
ROWS="$WORK/rows.jsonl"
: > "$ROWS"
SERVER_PIDS=()

say() { printf '%s\n' "$*" >&2; }

cleanup() {
  stop_server || true
  stop_backend || true
  rm -rf "$WORK"
}
trap cleanup EXIT

[ -x "$OHA" ] || { say "oha not found (set OHA, or: cargo install oha --locked)"; exit 1; }
[ -x "$GATEHOUSE" ] || { say "gatehouse binary not found at $GATEHOUSE (cargo build --release)"; exit 1; }

# --- the files every server serves -------------------------------------------------------
WWW="$WORK/www"
mkdir -p "$WWW"
head -c 1024 /dev/urandom > "$WWW/1k.bin"
head -c $((1024 * 1024)) /dev/urandom > "$WWW/1m.bin"
cp "$ROOT/bench/app.js" "$WWW/app.js"
# files-10k's files, named without a dot: oha's --rand-regex-url reads a dot as a separator.
python3 - "$WWW/f" 10000 <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d, exist_ok=True)
for i in range(n):
    with open(os.path.join(d, "%04d" % i), "wb") as f:
        f.write(os.urandom(1024))
PY
chmod -R a+rX "$WWW"
# One certificate for every server in the TLS scenarios: ECDSA P-256, as most sites use.
CERT="$WORK/cert.pem" KEY="$WORK/key.pem"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout "$KEY" -out "$CERT" 2> /dev/null
chmod a+r "$CERT" "$KEY"
GH_TLS_TOML="\n[tls]\nlisten = \"127.0.0.1:$TLS_GH\"\n[[tls.certs]]\ncert = \"$CERT\"\nkey = \"$KEY\""
# nginx 1.22 (Debian 12) knows `listen ... ssl http2`; later versions warn and accept it.
NGINX_TLS="listen 127.0.0.1:$TLS_NGINX ssl http2;
    ssl_certificate $CERT;
    ssl_certificate_key $KEY;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:SSL:10m;"

scenario_path() {
  case "$1" in
    static-1k) echo /1k.bin ;;
    static-1m) echo /1m.bin ;;
    text-gzip) echo /app.js ;;
    proxy-1k | cache-1k) echo /1k.bin ;;
    cache-cold) echo /c/00000 ;;
    https-1k | h2-1k | h3-1k | h3-1k-aioquic) echo /1k.bin ;;
    https-1m | h3-1m) echo /1m.bin ;;
    log-1k | auth-basic-1k | idle-1000) echo /1k.bin ;;
    files-10k) echo /f/0000 ;;
    notfound) echo /nf/missing ;;
    tls-handshake | conn-10k) echo /1k.bin ;;
    rules-1k) echo /1k.bin ;;
    redirect) echo /old ;;
    *) return 1 ;;
  esac
}

# The request header a scenario sends, if any.
scenario_header() {
  case "$1" in
    text-gzip) echo "Accept-Encoding: gzip" ;;
    auth-basic-1k) echo "Authorization: Basic YmVuY2g6YmVuY2g=" ;;
    rules-1k) echo "Origin: https://app.example.test" ;;
    *) echo "" ;;
  esac
}

is_tls() { case "$1" in https-* | h2-* | h3-* | tls-*) return 0 ;; *) return 1 ;; esac; }
is_h2() { case "$1" in h2-*) return 0 ;; *) return 1 ;; esac; }
is_h3() { case "$1" in h3-*) return 0 ;; *) return 1 ;; esac; }
is_cache() { case "$1" in cache-*) return 0 ;; *) return 1 ;; esac; }
is_aioquic() { case "$1" in *-aioquic) return 0 ;; *) return 1 ;; esac; }

# The load, for `measure`'s scenario, url, conns and hargs: oha, or for *-aioquic
# bench/h3load.py with as many connections and streams. Prints oha's JSON.
load() { # duration
  if is_aioquic "$scenario"; then
    python3 "$ROOT/bench/h3load.py" -z "$1" -c "$conns" -p 4 "$url"
  else
    "$OHA" -z "$1" -c "$conns" --no-tui --disable-compression -w "${hargs[@]}" \
      --output-format json "$url"
  fi
}

# What a server lacks for a scenario, if anything (the scenario then skips it, saying so).
lacks() { # scenario server
  if { [ "$1" = auth-basic-1k ] || [ "$1" = rules-1k ] || [ "$1" = redirect ]; } && [ "$2" = caddy ]; then
    echo "compared with nginx only (the issue's scenario)"
    return
  fi
  if is_cache "$1" && [ "$2" = caddy ]; then
    echo "Caddy has no response cache without a plugin (cache-handler)"
    return
  fi
  if is_h3 "$1" && ! is_aioquic "$1"; then
    if ! "$OHA" --help | grep -q 'Available values 0.9, 1.0, 1.1, 2, 3'; then
      echo "oha was built without HTTP/3 (cargo install oha --locked --features http3)"
      return
    fi
    if [ "$2" = caddy ]; then
      # Measured by hand (2026-12-05): without SNI (an IP in the URL) Caddy's quic-go ends
      # the handshake with alert 80; with SNI oha's quinn client stalls. aioquic gets through.
      echo "oha's HTTP/3 client cannot complete a handshake with Caddy 2.6's quic-go here (alert 80 without SNI, a stall with it); see h3-1k-aioquic"
      return
    fi
  fi
  if is_h3 "$1"; then
    if [ "$2" = nginx ]; then
      echo "nginx $("$NGINX" -v 2>&1 | sed 's/.*nginx\///') here has no HTTP/3 (Debian builds 1.22 without http_v3_module)"
      return
    fi
  fi
  if [ "$2" = nginx ] && is_tls "$1"; then
    local v
    v=$("$NGINX" -V 2>&1)
    case "$v" in *http_ssl_module*) ;; *) echo "nginx built without ssl"; return ;; esac
    if is_h2 "$1"; then
      case "$v" in *http_v2_module*) ;; *) echo "nginx built without http2"; return ;; esac
    fi
  fi
  echo ""
}

# --- starting and stopping servers -------------------------------------------------------
wait_port() { # port [scheme]
  local port=$1 i
  for i in $(seq 1 100); do
    if curl -sk -o /dev/null "${2:-http}://127.0.0.1:$port/"; then return 0; fi
    sleep 0.05
  done
  return 1
}

stop_server() {
  local p
  for p in "${SERVER_PIDS[@]:-}"; do
    [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true
  done
  for p in "${SERVER_PIDS[@]:-}"; do
    [ -n "$p" ] && wait "$p" 2>/dev/null || true
  done
  SERVER_PIDS=()
}

# All the processes of a server: the one we started and its children (nginx's workers).
server_pids() {
  local p
  for p in "${SERVER_PIDS[@]}"; do
    echo "$p"
    pgrep -P "$p" || true
  done
}

start_gatehouse() { # binary runtime extra-toml metrics
  local bin=$1 runtime=$2 extra=$3 metrics=${4:-on} conf="$WORK/gatehouse.toml"
  {
    echo "root = \"$WWW\""
    echo "listen = \"127.0.0.1:$PORT_GH\""
    echo "admin_listen = \"127.0.0.1:$ADMIN_GH\""
    echo "log_level = \"warn\""
    [ -n "$runtime" ] && echo "runtime = \"$runtime\""
    [ -n "$extra" ] && printf '%b\n' "$extra"
    [ "$metrics" = off ] && printf '[metrics]\nenabled = false\n'
    true
  } > "$conf"
  # A clean environment: GATEHOUSE_BASE and friends must not reach figment's GATEHOUSE_* keys.
  env -i PATH="$PATH" HOME="$HOME" "$bin" --config "$conf" 2>> "$WORK/gatehouse.log" > "$WORK/gatehouse.stdout" &
  SERVER_PIDS=($!)
  wait_port "$PORT_GH"
}

# An nginx configuration: its own directory under $WORK, listening on a port, with a
# server block body. The measured nginx and the proxy-1k backend share everything else.
write_nginx_conf() { # name port server-body [http-extra]
  local name=$1 port=$2 site=$3 http_extra=${4:-} user_line=""
  mkdir -p "$WORK/$name"
  [ "$(id -u)" = 0 ] && user_line="user root;"
  cat > "$WORK/$name.conf" <<EOF
$user_line
worker_processes 2;
daemon off;
pid $WORK/$name/nginx.pid;
error_log $WORK/$name/error.log warn;
events { worker_connections $NGINX_WORKER_CONNECTIONS; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_timeout 65;
  keepalive_requests 100000000;
  open_file_cache max=$NGINX_OPEN_FILES inactive=60s;
  open_file_cache_valid 1s;
  open_file_cache_errors on;
  client_body_temp_path $WORK/$name/body;
  proxy_temp_path $WORK/$name/proxy;
  fastcgi_temp_path $WORK/$name/fastcgi;
  uwsgi_temp_path $WORK/$name/uwsgi;
  scgi_temp_path $WORK/$name/scgi;
  default_type application/octet-stream;
  types { application/javascript js; }
  gzip on;
  gzip_comp_level 6;
  gzip_types application/javascript;
  upstream backend {
    server 127.0.0.1:$PORT_BACKEND;
    keepalive 128;
  }
  $http_extra
  server {
    listen 127.0.0.1:$port;
    $site
  }
}
EOF
}

start_nginx() { # [static|proxy|tls|log]
  local site="root $WWW;"
  if [ "${1:-}" = auth ]; then
    site="root $WWW;
    auth_basic \"bench\";
    auth_basic_user_file $WORK/htpasswd;"
  elif [ "${1:-}" = log ]; then
    site="root $WWW;
    access_log $WORK/nginx-access.log combined;"
  elif [ "${1:-}" = rules ]; then
    site="root $WWW;
    add_header X-Frame-Options DENY always;
    add_header X-Content-Type-Options nosniff always;
    add_header Referrer-Policy no-referrer always;
    add_header Access-Control-Allow-Origin https://app.example.test always;
    add_header Access-Control-Allow-Credentials true always;
    add_header Vary Origin always;
    add_header X-Request-Id \$request_id always;"
  elif [ "${1:-}" = redirect ]; then
    site="root $WWW;
    location = /old { return 301 /1k.bin; }"
  elif [ "${1:-static}" = proxy ]; then
    site="location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection \"\"; }"
  elif [ "${1:-}" = cache ]; then
    # proxy_cache_valid unset: the upstream's Cache-Control rules, as in gatehouse.
    site="location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_cache bench; proxy_cache_lock on; }"
    rm -rf "$WORK/nginx/cache"
    http_extra="proxy_cache_path $WORK/nginx/cache levels=1:2 keys_zone=bench:64m max_size=1g inactive=60m use_temp_path=off;"
  elif [ "${1:-}" = tls ]; then
    site="root $WWW;
    $NGINX_TLS"
  fi
  write_nginx_conf nginx "$PORT_NGINX" "$site" "${http_extra:-}"
  "$NGINX" -c "$WORK/nginx.conf" -e "$WORK/nginx/error.log" 2>> "$WORK/nginx.log" &
  SERVER_PIDS=($!)
  wait_port "$PORT_NGINX"
}

start_caddy() { # [proxy]
  local conf="$WORK/Caddyfile" site
  mkdir -p "$WORK/caddy"
  site="root * $WWW
  encode {
    gzip 6
  }
  file_server"
  [ "${1:-}" = proxy ] && site="reverse_proxy 127.0.0.1:$PORT_BACKEND"
  # Caddy has no combined format without a plugin: it writes its own JSON lines.
  [ "${1:-}" = log ] && site="$site
  log {
    output file $WORK/caddy-access.log {
      roll_disabled
    }
    format json
  }"
  cat > "$conf" <<EOF
{
  admin off
  auto_https off
}
http://127.0.0.1:$PORT_CADDY {
  $site
}
EOF
  if [ "${1:-}" = tls ]; then
    cat >> "$conf" <<EOF
https://127.0.0.1:$TLS_CADDY {
  tls $CERT $KEY
  $site
}
EOF
  fi
  XDG_DATA_HOME="$WORK/caddy" XDG_CONFIG_HOME="$WORK/caddy" HOME="$WORK/caddy" \
    "$CADDY" run --config "$conf" --adapter caddyfile >> "$WORK/caddy.log" 2>&1 &
  SERVER_PIDS=($!)
  wait_port "$PORT_CADDY"
}

# The floor (bench/floor.c): the scenario's file from memory, gzip'ed once for text-gzip.
start_floor() { # scenario [hyper]
  local file="$WWW/1k.bin" enc=""
  if [ "$1" = text-gzip ]; then
    gzip -6 -n -c "$WWW/app.js" > "$WORK/app.js.gz"
    file="$WORK/app.js.gz" enc=gzip
  fi
  local fields=""
  if [ "$1" = rules-1k ]; then
    # The fields rules-1k's rules add, as gatehouse and nginx send them.
    fields=$(printf '%s\n' "X-Frame-Options: DENY" "X-Content-Type-Options: nosniff" \
      "Referrer-Policy: no-referrer" "Access-Control-Allow-Origin: https://app.example.test" \
      "Access-Control-Allow-Credentials: true" "Vary: Origin" \
      "X-Request-Id: 0193a5f2-7c1e-7d3a-9b4e-5f6a7b8c9d0e")
  fi
  if [ "$1" = cache-1k ]; then
    # The fields a hit sends: the backend's, as stored, with Via and Age (hyper adds Date
    # and Content-Length).
    fields=$(curl -s -D - -o /dev/null "http://127.0.0.1:$PORT_BACKEND/1k.bin" | tr -d '\r' |
      grep -iv '^\(HTTP/\|date:\|content-length:\|connection:\|keep-alive:\|$\)'
      printf '%s\n' "Via: 1.1 gatehouse" "Age: 0")
  fi
  if [ "${2:-}" = hyper ] && is_tls "$1"; then
    "$TLS_FLOOR" "127.0.0.1:$PORT_FLOOR" "$CERT" "$KEY" "$WWW$(scenario_path "$1")" 2>> "$WORK/floor.log" &
  elif [ "${2:-}" = hyper ]; then
    BARE_HYPER_HEADERS=$fields "$HYPER_FLOOR" "127.0.0.1:$PORT_FLOOR" "$file" $enc 2>> "$WORK/floor.log" &
  else
    "$WORK/floor" "$PORT_FLOOR" "$file" $enc 2>> "$WORK/floor.log" &
  fi
  SERVER_PIDS=($!)
  if is_tls "$1"; then wait_port "$PORT_FLOOR" https; else wait_port "$PORT_FLOOR"; fi
}

# The backend for proxy-1k: an nginx of its own, outside SERVER_PIDS, so its CPU is not
# counted against the proxy being measured.
start_backend() { # [cache]
  local site="root $WWW;"
  # cache-*: every response fresh for 10 minutes, and /c/<n> (cache-cold's keys) the 1 KiB file.
  [ "${1:-}" = cache ] && site="root $WWW;
    expires 10m;
    location /c/ { try_files /1k.bin =404; }"
  write_nginx_conf backend "$PORT_BACKEND" "$site"
  "$BACKEND_NGINX" -c "$WORK/backend.conf" -e "$WORK/backend/error.log" 2>> "$WORK/backend.log" &
  BACKEND_PID=$!
  wait_port "$PORT_BACKEND"
}

stop_backend() {
  [ -n "$BACKEND_PID" ] || return 0
  kill -TERM "$BACKEND_PID" 2>/dev/null || true
  wait "$BACKEND_PID" 2>/dev/null || true
  BACKEND_PID=
}

# --- measuring ---------------------------------------------------------------------------
cpu_ticks() { # sums of utime+stime, and of utime alone, over the server's processes
  local total=0 user=0 p f
  for p in $(server_pids); do
    f=$(cut -d')' -f2- "/proc/$p/stat" 2>/dev/null) || continue
    set -- $f
    total=$((total + ${12} + ${13}))
    user=$((user + ${12}))
  done
  echo "$total $user"
}

peak_rss_kib() { # sum of each process's peak RSS
  local total=0 p v
  for p in $(server_pids); do
    v=$(awk '/^VmHWM:/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)
    total=$((total + ${v:-0}))
  done
  echo "$total"
}

# Checks one response before the load: the body must be the file (for text-gzip: valid gzip,
# sent as such, that decodes to the file). Prints the body length every response must have.
check_body() { # port path expected-file header [tls|h2]
  local got="$WORK/check.body" hdrs="$WORK/check.headers" base="http://127.0.0.1:$1" copts=()
  case "${5:-}" in
    tls) base="https://127.0.0.1:$1" copts=(--cacert "$CERT" --http1.1) ;;
    h2) base="https://127.0.0.1:$1" copts=(--cacert "$CERT" --http2 -D "$hdrs") ;;
    h3)
      # Debian's curl has no HTTP/3: the tests' aioquic client asks instead.
      local line
      # SNI localhost: Caddy ends a handshake without SNI (alert 80).
      line=$(printf '{"port": %s, "ca": "%s", "server_name": "localhost", "authority": "127.0.0.1:%s", "requests": [{"method": "GET", "path": "%s"}]}' \
        "$1" "$CERT" "$1" "$2" | python3 "$ROOT/gateway/tests/fixtures/h3_client.py" 10 2>> "$WORK/h3check.log") || return 1
      python3 - "$line" "$3" <<'PY' || { say "  not the file over HTTP/3"; return 1; }
import hashlib, json, sys
r, want = json.loads(sys.argv[1]), open(sys.argv[2], "rb").read()
sys.exit(0 if r.get("status") == 200 and r.get("sha256") == hashlib.sha256(want).hexdigest() else 1)
PY
      stat -c %s "$3"
      return 0 ;;
  esac
  if [ -n "$4" ] && [ "${4%%:*}" != Accept-Encoding ]; then
    copts+=(-H "$4")
  fi
  if [ -z "$4" ] || [ "${4%%:*}" != Accept-Encoding ]; then
    curl -s "${copts[@]}" -o "$got" "$base$2" || return 1
    if [ "${5:-}" = h2 ] && ! head -n1 "$hdrs" | grep -q '^HTTP/2'; then
      say "  not served over HTTP/2"
      return 1
    fi
    cmp -s "$got" "$3" || { say "  the body is not the file"; return 1; }
  else
    curl -s -D "$hdrs" -H "$4" -o "$got" "http://127.0.0.1:$1$2" || return 1
    if ! grep -qi '^content-encoding: *gzip' "$hdrs"; then
      say "  the response is not gzip-encoded (the server did not compress)"
      return 1
    fi
    gzip -dc < "$got" | cmp -s - "$3" || { say "  the gzip body does not decode to the file"; return 1; }
  fi
  stat -c %s "$got"
}

# files-10k: one request for each file before the load, so that every server's cache holds
# them all, as it would after a while in production.
touch_files() { # port
  python3 - "$1" <<'PY'
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
for i in range(10000):
    c.request("GET", "/f/%04d" % i)
    r = c.getresponse()
    body = r.read()
    if r.status != 200 or len(body) != 1024:
        sys.exit(f"/f/{i:04d}: {r.status}, {len(body)} bytes")
PY
}

# tls-handshake: whether the server resumes a session for a client that offers one, as oha
# does (its rustls client keeps each server's tickets and offers them on the next
# connection): 20 connections in a row, each offering the previous one's session. Said
# on stderr and kept in the results' Markdown, so a comparison is known to be like for like.
tls_resumption() { # server port
  local line
  line=$(python3 - "$2" "$CERT" <<'PY'
import socket, ssl, sys
port, ca = int(sys.argv[1]), sys.argv[2]
ctx = ssl.create_default_context(cafile=ca)
sess, resumed, first = None, 0, None
for _ in range(20):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1", session=sess) as t:
            t.sendall(b"GET /1k.bin HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            while t.recv(65536):
                pass
            first = first or f"{t.version()} {t.cipher()[0]}"
            resumed += t.session_reused
            sess = t.session
print(f"{first}: {resumed} of 20 handshakes resumed, {20 - resumed} full")
PY
) || line="the probe failed"
  say "  $1 TLS: $line"
  echo "$1: $line" >> "$WORK/tls-resumption"
}

measure() { # scenario server port
  local scenario=$1 server=$2 port=$3 path expected url header size kind="" conns=$CONNECTIONS
  path=$(scenario_path "$scenario")
  header=$(scenario_header "$scenario")
  expected="$WWW${path}"
  [ "$scenario" = cache-cold ] && expected="$WWW/1k.bin"
  url="http://127.0.0.1:$port$path"
  local hargs=()
  if is_tls "$scenario"; then
    url="https://127.0.0.1:$port$path" kind=tls
    hargs+=(--insecure)
  fi
  if is_h2 "$scenario"; then
    # As many requests in flight as the HTTP/1.1 scenarios: a quarter of the
    # connections, four streams on each.
    kind=h2 conns=$(( (CONNECTIONS + 3) / 4 ))
    hargs+=(--http2 -p 4)
  fi
  if is_h3 "$scenario"; then
    kind=h3 conns=$(( (CONNECTIONS + 3) / 4 ))
    hargs+=(--http-version 3 -p 4)
  fi
  local expect_status=200
  if [ "$scenario" = redirect ]; then
    expect_status=301 size=0
    hargs+=(--redirect 0)
    if [ "$(curl -s -o /dev/null -w '%{http_code} %{redirect_url}' "$url")" != "301 http://127.0.0.1:$port/1k.bin" ]; then
      say "  $server: $path was not a 301 to /1k.bin; not measured"
      echo "$scenario $server" >> "$WORK/unmeasured"
      return 0
    fi
  elif [ "$scenario" = notfound ]; then
    # Any body will do, so long as it says 404 (each server writes its own page).
    expect_status=404 size=0
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "$url")" != 404 ]; then
      say "  $server: $path was not a 404; not measured"
      echo "$scenario $server" >> "$WORK/unmeasured"
      return 0
    fi
  elif ! size=$(check_body "$port" "$path" "$expected" "$header" "$kind"); then
    say "  $server: $path failed its check; not measured"
    echo "$scenario $server" >> "$WORK/unmeasured"
    return 0
  fi
  case "$scenario" in
    files-10k)
      touch_files "$port" || { say "  $server: the pass over the files failed; not measured"; echo "$scenario $server" >> "$WORK/unmeasured"; return 0; }
      url="http://127.0.0.1:$port/f/[0-9]{4}"
      hargs+=(--rand-regex-url) ;;
    notfound)
      url="http://127.0.0.1:$port/nf/[a-z0-9]{16}"
      hargs+=(--rand-regex-url) ;;
    cache-cold)
      # 50,000 keys, each new to the cache the first time: mostly misses in a short run.
      conns=64
      url="http://127.0.0.1:$port/c/[0-4][0-9]{4}"
      hargs+=(--rand-regex-url) ;;
    tls-handshake)
      conns=$HANDSHAKE_CONNECTIONS
      hargs+=(--disable-keepalive) ;;
    conn-10k)
      conns=$CONN10K_CONNECTIONS
      hargs+=(-q "$CONN10K_RATE") ;;
  esac
  [ -n "$header" ] && hargs+=(-H "$header")
  local idle_pid=""
  echo 0 > "$WORK/idle.failed"
  if [ "$scenario" = idle-1000 ]; then
    conns=$IDLE_ACTIVE
    hargs+=(-q "$IDLE_RATE")
    rm -f "$WORK/idle.stop"
    python3 "$ROOT/bench/idle.py" 127.0.0.1 "$port" "$IDLE_CONNECTIONS" "$path" "$WORK/idle.stop" > "$WORK/idle.json" &
    idle_pid=$!
    sleep 2
  fi
  load "$WARMUP" > "$WORK/warm.json" 2> /dev/null || true
  local hz t0 t1 u0 u1
  hz=$(getconf CLK_TCK)
  # gatehouse's own view of the same window, from its /metrics (empty when off, or for
  # another server).
  : > "$WORK/metrics0" ; : > "$WORK/metrics1"
  case "$server" in gatehouse*) curl -s -m 5 "http://127.0.0.1:$ADMIN_GH/metrics" > "$WORK/metrics0" || true ;; esac
  read -r t0 u0 <<< "$(cpu_ticks)"
  load "$DURATION" > "$WORK/oha.json" 2> "$WORK/oha.err" || true
  read -r t1 u1 <<< "$(cpu_ticks)"
  case "$server" in gatehouse*) curl -s -m 5 "http://127.0.0.1:$ADMIN_GH/metrics" > "$WORK/metrics1" || true ;; esac
  local rss
  rss=$(peak_rss_kib)
  if [ -n "$idle_pid" ]; then
    # Every idle connection must still be open and answer its last request.
    touch "$WORK/idle.stop"
    wait "$idle_pid" || true
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["failed"] + (int(sys.argv[2]) - d["held"]))' \
      "$WORK/idle.json" "$IDLE_CONNECTIONS" > "$WORK/idle.failed" 2> /dev/null || echo "$IDLE_CONNECTIONS" > "$WORK/idle.failed"
    say "  idle connections: $(cat "$WORK/idle.json" 2> /dev/null)"
  fi
  [ "$scenario" = tls-handshake ] && tls_resumption "$server" "$port"
  USER_TICKS=$((u1 - u0)) EXPECT_STATUS=$expect_status python3 - "$WORK/oha.json" "$scenario" "$server" "$((t1 - t0))" "$hz" "$rss" \
    "$size" "$WORK/metrics0" "$WORK/metrics1" "$(cat "$WORK/idle.failed")" >> "$ROWS" <<'PY'
import json, os, sys
path, scenario, server, ticks, hz, rss_kib, size, m0, m1, idle_failed = sys.argv[1:]

def scrape(p):
    """process_cpu_seconds_total and the sum of gatehouse_http_requests_total."""
    cpu, reqs = None, 0.0
    for line in open(p):
        if line.startswith("process_cpu_seconds_total "):
            cpu = float(line.split()[1])
        elif line.startswith("gatehouse_http_requests_total{"):
            reqs += float(line.rsplit(" ", 1)[1])
    return cpu, reqs

def metrics_cpu():
    try:
        (c0, r0), (c1, r1) = scrape(m0), scrape(m1)
    except (OSError, ValueError, IndexError):
        return None
    if c0 is None or c1 is None or r1 <= r0:
        return None
    return round((c1 - c0) * 1e6 / (r1 - r0), 2)

ticks, hz, rss_kib, size = int(ticks), int(hz), int(rss_kib), int(size)
try:
    d = json.load(open(path))
except Exception as e:
    print(json.dumps({"scenario": scenario, "server": server, "rps": 0, "p50_ms": None,
                      "p99_ms": None, "cpu_us_per_req": None, "rss_mib": None,
                      "requests": 0, "errors": None, "note": f"oha output unreadable: {e}"}))
    sys.exit(0)
codes = {int(k): v for k, v in (d.get("statusCodeDistribution") or {}).items()}
ok = codes.get(int(os.environ.get("EXPECT_STATUS", "200")), 0)
requests = sum(codes.values())
errors = requests - ok + sum((d.get("errorDistribution") or {}).values()) + int(idle_failed)
# Any 200 whose body was not the file's length shows in the byte total (size 0: any body).
total = d["summary"].get("totalData") or 0
if ok and size and total != ok * size:
    errors += max(1, abs(total - ok * size) // max(size, 1))
lat = d.get("latencyPercentiles") or {}
ms = lambda v: round(v * 1000, 3) if v is not None else None
row = {
    "scenario": scenario,
    "server": server,
    "round": int(os.environ.get("BENCH_ROUND", "1")),
    "rps": round(d["summary"].get("requestsPerSec") or 0, 1),
    "p50_ms": ms(lat.get("p50")),
    "p99_ms": ms(lat.get("p99")),
    "cpu_us_per_req": round(ticks / hz * 1e6 / requests, 2) if requests else None,
    "metrics_cpu_us_per_req": metrics_cpu(),
    # User space's share of the CPU (the rest is the kernel's): what a change to
    # gatehouse's own code can move.
    "cpu_user_share": round(int(os.environ["USER_TICKS"]) / ticks, 3) if ticks else None,
    "rss_mib": round(rss_kib / 1024, 1),
    "requests": requests,
    "errors": errors,
}
print(json.dumps(row))
PY
  tail -n1 "$ROWS" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("  %-15s %9s req/s  p50 %s ms  p99 %s ms  cpu %s us/req  rss %s MiB  errors %s" % (r["server"], r["rps"], r["p50_ms"], r["p99_ms"], r["cpu_us_per_req"], r["rss_mib"], r["errors"]))' >&2
}

# log-1k: once the server has stopped (and flushed), its log must have a line for every
# request it answered: the check, the warm-up and the measured ones. Any difference is
# added to the row's errors.
count_log_lines() { # server
  local lines
  # Lines for the file only (the readiness probe's request for / is logged too), in the
  # log and any file it was rolled over to.
  lines=$(cat "$WORK/${1%-base}"-access*.log 2> /dev/null | grep -c '/1k.bin' || true)
  python3 - "$ROWS" "$WORK/warm.json" "$lines" "$1" <<'PY'
import json, sys
rows_path, warm_path, lines, server = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rows = [json.loads(l) for l in open(rows_path) if l.strip()]
if not rows:
    sys.exit(0)
r = rows[-1]
if r["server"] != server or r["scenario"] != "log-1k":
    sys.exit(0)
try:
    warm = sum(json.load(open(warm_path))["statusCodeDistribution"].values())
except Exception:
    warm = 0
expected = 1 + warm + r["requests"]
lost = abs(expected - lines)
print(f"  {server}: {lines} log lines for {expected} requests" + (f" ({lost} off)" if lost else ""), file=sys.stderr)
if lost:
    r["errors"] = (r["errors"] or 0) + lost
rows[-1] = r
open(rows_path, "w").write("".join(json.dumps(x) + "\n" for x in rows))
PY
}

run_server() { # scenario server
  local scenario=$1 server=$2 mode=static gh_toml=$GATEHOUSE_TOML base_toml=$BASE_TOML
  local p_gh=$PORT_GH p_nginx=$PORT_NGINX p_caddy=$PORT_CADDY missing
  NGINX_WORKER_CONNECTIONS=8192 NGINX_OPEN_FILES=10000
  case "$scenario" in
    files-10k | notfound)
      NGINX_OPEN_FILES=20000
      # The same size of cache for gatehouse, when it runs with the nginx-equivalent settings.
      [ "$gh_toml" = "$NGINX_EQUIVALENT" ] && gh_toml="$gh_toml\nmax_entries = 20000"
      [ "$base_toml" = "$NGINX_EQUIVALENT" ] && base_toml="$base_toml\nmax_entries = 20000" ;;
    conn-10k) NGINX_WORKER_CONNECTIONS=$((CONN10K_CONNECTIONS + 1024)) ;;
  esac
  if [ "$scenario" = proxy-1k ]; then
    mode=proxy gh_toml=$PROXY_TOML base_toml=$PROXY_TOML
  fi
  if is_cache "$scenario"; then
    mode=cache gh_toml=$CACHE_TOML base_toml=$CACHE_TOML
  fi
  if [ "$scenario" = auth-basic-1k ]; then
    mode=auth gh_toml=$AUTH_TOML base_toml=$AUTH_TOML
  fi
  if [ "$scenario" = rules-1k ] || [ "$scenario" = redirect ]; then
    # BASE_TOML, when set, is the base's: the bare route against the rules in one run.
    mode=${scenario%-1k} gh_toml=$RULES_TOML
    [ "$scenario" = redirect ] && gh_toml=$REDIRECT_TOML
    [ "${BASE_TOML_SET:-}" = 1 ] || base_toml=$gh_toml
  fi
  if [ "$scenario" = log-1k ]; then
    mode=log gh_toml=$LOG_TOML base_toml=$LOG_TOML
    rm -f "$WORK"/*-access*.log
  fi
  if is_tls "$scenario"; then
    local tls_toml=$GH_TLS_TOML
    # Only here: a base build from before HTTP/3 refuses the key.
    is_h3 "$scenario" && tls_toml=${tls_toml/'[[tls.certs]]'/'http3 = true\n[[tls.certs]]'}
    mode=tls gh_toml="$gh_toml$tls_toml" base_toml="$base_toml$tls_toml"
    p_gh=$TLS_GH p_nginx=$TLS_NGINX p_caddy=$TLS_CADDY
  fi
  # The floor only answers plain HTTP from memory: it has no other scenario to skip.
  # hyper-floor answers rules-1k too, with its rules' fields: what writing them costs hyper.
  if [ "$server" = floor ] || [ "$server" = hyper-floor ]; then
    case "$scenario" in
      static-1k | text-gzip | cache-1k) ;;
      rules-1k | https-1k | h2-1k | h3-1k | h3-1m) [ "$server" = hyper-floor ] || return 0 ;;
      *) return 0 ;;
    esac
  fi
  missing=$(lacks "$scenario" "$server")
  if [ -n "$missing" ]; then
    say "  $server skipped: $missing"
    echo "$scenario $server" >> "$WORK/unmeasured"
    return 0
  fi
  case "$server" in
    gatehouse)
      start_gatehouse "$GATEHOUSE" "$RUNTIME" "$gh_toml" "$METRICS" || { say "  gatehouse did not start"; stop_server; return 0; }
      measure "$scenario" gatehouse "$p_gh" ;;
    gatehouse-base)
      start_gatehouse "$GATEHOUSE_BASE" "$BASE_RUNTIME" "$base_toml" "$BASE_METRICS" || { say "  gatehouse-base did not start"; echo "$scenario gatehouse-base" >> "$WORK/unmeasured"; stop_server; return 0; }
      measure "$scenario" gatehouse-base "$p_gh" ;;
    nginx)
      start_nginx "$mode" || { say "  nginx did not start"; stop_server; return 0; }
      measure "$scenario" nginx "$p_nginx" ;;
    caddy)
      start_caddy "$mode" || { say "  caddy did not start"; stop_server; return 0; }
      measure "$scenario" caddy "$p_caddy" ;;
    floor)
      start_floor "$scenario" || { say "  the floor did not start"; stop_server; return 0; }
      measure "$scenario" floor "$PORT_FLOOR" ;;
    hyper-floor)
      start_floor "$scenario" hyper || { say "  hyper-floor did not start"; stop_server; return 0; }
      measure "$scenario" hyper-floor "$PORT_FLOOR" ;;
  esac
  stop_server
  [ "$scenario" = log-1k ] && count_log_lines "$server"
  return 0
}

SERVERS=(gatehouse)
if [ -n "$GATEHOUSE_BASE" ] || [ -n "$BASE_RUNTIME" ] || [ "${BASE_TOML_SET:-}" = 1 ] || [ "$BASE_METRICS" != "$METRICS" ]; then
  GATEHOUSE_BASE=${GATEHOUSE_BASE:-$GATEHOUSE}
  SERVERS+=(gatehouse-base)
fi
if [ -n "$NGINX" ] && [ -x "$(command -v "$NGINX")" ]; then SERVERS+=(nginx); else say "nginx not found: skipped"; fi
if [ -n "$CADDY" ] && [ -x "$(command -v "$CADDY")" ]; then SERVERS+=(caddy); else say "caddy not found: skipped"; fi
if [ "$FLOOR" = 1 ]; then
  if cc -O2 -o "$WORK/floor" "$ROOT/bench/floor.c" 2>> "$WORK/floor.log"; then
    SERVERS+=(floor)
  else
    say "FLOOR: bench/floor.c did not build (a C compiler is needed): skipped"
  fi
  # The default is built from these sources (a no-op when it is up to date), never stale.
  hyper_built=1
  if [ "$HYPER_FLOOR" = "$ROOT/target/release/examples/bare_hyper" ]; then
    (cd "$ROOT" && cargo build -q --release --workspace --example bare_hyper) 2>> "$WORK/floor.log" ||
      hyper_built=0
  fi
  if [ "$TLS_FLOOR" = "$ROOT/target/release/examples/bare_tls" ]; then
    (cd "$ROOT" && cargo build -q --release --workspace --example bare_tls) 2>> "$WORK/floor.log" ||
      hyper_built=0
  fi
  if [ "$hyper_built" = 1 ] && [ -x "$HYPER_FLOOR" ] && [ -x "$TLS_FLOOR" ]; then
    SERVERS+=(hyper-floor)
  else
    say "FLOOR: $HYPER_FLOOR did not build: hyper-floor skipped"
  fi
fi

say "gatehouse bench: $DURATION at $CONNECTIONS connections (warm-up $WARMUP), $(nproc) CPUs"
IFS=',' read -r -a SCEN <<< "$SCENARIOS"
for scenario in "${SCEN[@]}"; do
  if ! scenario_path "$scenario" > /dev/null; then
    say "unknown scenario: $scenario"
    exit 2
  fi
  say "$scenario"
  if [ "$scenario" = proxy-1k ]; then
    start_backend || { say "  the backend nginx did not start"; stop_backend; continue; }
  elif is_cache "$scenario"; then
    start_backend cache || { say "  the backend nginx did not start"; stop_backend; continue; }
  fi
  for round in $(seq 1 "$ROUNDS"); do
    [ "$ROUNDS" -gt 1 ] && say " round $round"
    export BENCH_ROUND=$round
    for k in "${!SERVERS[@]}"; do
      run_server "$scenario" "${SERVERS[$(( (k + round - 1) % ${#SERVERS[@]} ))]}"
    done
  done
  stop_backend
done

touch "$WORK/unmeasured"
touch "$WORK/tls-resumption"
python3 - "$ROWS" "$OUT_DIR" "$DURATION" "$CONNECTIONS" "$WORK/unmeasured" "$WORK/tls-resumption" <<'PY'
import json, sys, os, platform
rows_path, out, duration, conns, unmeasured, resumption = sys.argv[1:]
rows = [json.loads(l) for l in open(rows_path) if l.strip()]
keys = ["scenario", "server", "round", "rps", "p50_ms", "p99_ms", "cpu_us_per_req", "metrics_cpu_us_per_req", "cpu_user_share", "rss_mib", "requests", "errors"]
json.dump([{k: r.get(k) for k in keys} for r in rows], open(os.path.join(out, "bench-results.json"), "w"), indent=2)
nginx = {(r["scenario"], r.get("round", 1)): r for r in rows if r["server"] == "nginx"}
rounds = max((r.get("round", 1) for r in rows), default=1)
lines = [
    f"Load: oha, HTTP/1.1 keep-alive, {conns} connections, {duration} per scenario after a warm-up; "
    f"{os.cpu_count()} CPUs, load generator on the same machine. https-*, h2-* and tls-handshake use TLS "
    f"(one self-signed ECDSA P-256 certificate for all); h2-* uses HTTP/2 and h3-* HTTP/3 (over QUIC), each with a quarter of the "
    f"connections and 4 streams on each; h3-1k-aioquic is loaded by bench/h3load.py (aioquic, one Python core) instead of oha. files-10k asks for a random one of 10,000 files, notfound for "
    f"random missing paths (answered 404), tls-handshake makes a new TLS connection per request from "
    f"{os.environ.get('HANDSHAKE_CONNECTIONS', 32)} clients, and conn-10k holds "
    f"{os.environ.get('CONN10K_CONNECTIONS', 10000)} connections making "
    f"{os.environ.get('CONN10K_RATE', 20000)} requests a second in all.",
    "",
    "| scenario | server | req/s | p50 ms | p99 ms | CPU µs/req | vs nginx | per its /metrics | peak RSS MiB | requests | errors |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]
def ratio_of(r):
    n = nginx.get((r["scenario"], r.get("round", 1)))
    if n and n.get("cpu_us_per_req") and r.get("cpu_us_per_req") is not None:
        return r["cpu_us_per_req"] / n["cpu_us_per_req"]
    return None

def fmt(q):
    return f"{q:.3f}×" if q < 0.1 else f"{q:.2f}×"

if rounds > 1:
    import statistics
    medians = [
        f"Medians of {rounds} rounds (the servers take turns to go first); the ratio is the "
        f"median of each round's ratio to nginx in that round, with its range.",
        "",
        "| scenario | server | CPU µs/req | vs nginx | range | p99 ms | peak RSS MiB | errors |",
        "|---|---|---:|---:|---|---:|---:|---:|",
    ]
    for sc, sv in dict.fromkeys((r["scenario"], r["server"]) for r in rows):
        rs = [r for r in rows if r["scenario"] == sc and r["server"] == sv]
        med = lambda k: statistics.median([r[k] for r in rs if r.get(k) is not None] or [0])
        qs = [q for q in map(ratio_of, rs) if q is not None]
        rng = f"{fmt(min(qs))}–{fmt(max(qs))}" if qs else ""
        medians.append(f"| {sc} | {sv} | {med('cpu_us_per_req'):.2f} | "
                       f"{fmt(statistics.median(qs)) if qs else ''} | {rng} | {round(med('p99_ms'), 3)} | "
                       f"{round(med('rss_mib'), 1)} | {sum(r['errors'] or 0 for r in rs)} |")
    lines[2:2] = medians + ["", "Each round:", ""]
for r in rows:
    q = ratio_of(r)
    lines.append(
        f"| {r['scenario']} | {r['server']}{' #' + str(r['round']) if rounds > 1 else ''} | {r['rps']:,.0f} | {r['p50_ms']} | {r['p99_ms']} | "
        f"{r['cpu_us_per_req']} | {fmt(q) if q is not None else ''} | {r.get('metrics_cpu_us_per_req') or '—'} | "
        f"{r['rss_mib']} | {r['requests']:,} | {r['errors']} |"
    )
skipped = list(dict.fromkeys(tuple(l.split()) for l in open(unmeasured) if l.strip()))
if skipped:
    lines.append("")
    lines.append("Not measured, because the response failed its check (not the file, or for "
                 "text-gzip not valid gzip of it), the server lacks the feature, or it did not start: " + ", ".join(f"{s} on {sc}" for sc, s in skipped) + ".")
probes = list(dict.fromkeys(l.strip() for l in open(resumption) if l.strip()))
if probes:
    lines += ["", "tls-handshake: a new connection per request. Each server's resumption, probed with "
              "20 connections in a row that each offer the previous one's session (as oha's client does): "
              + "; ".join(probes) + "."]
open(os.path.join(out, "bench-results.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
