#!/usr/bin/env bash
# User-space instructions per request (valgrind's callgrind), two gatehouse builds side by
# side: repeatable to a fraction of a percent where CPU time per request swings by ±10%
# between rounds on a shared machine. It complements bench/run.sh's same-run A/B
# (GATEHOUSE_BASE=), it doesn't replace it: the kernel's share of a request (most of it)
# is not counted.
#
# Usage: bench/instructions.sh NEW_BINARY BASE_BINARY
# Inputs (environment): SCENARIOS ("static-1k proxy-1k h2-1k"; also h3-1k, cache-1k, cache-vary-1k (its origin sends Vary), rules-1k, its parts
# headers-1k, cors-1k and request-id-1k, and redirect, for which both binaries must know
# issue 32's keys), N (requests in the long
# run, 6000), SMALL (in the short run, 1000), CONNECTIONS (8). Each figure is
# (Ir(N) - Ir(SMALL)) / (N - SMALL): start-up, TLS handshakes and shutdown cancel out.
# One worker, the static route with the open-file cache as bench/run.sh configures it, on
# loopback; the proxy's backend is a gatehouse outside valgrind. Needs valgrind, oha,
# openssl, curl. CG_DIR: keep each callgrind file there, for callgrind_annotate.
# COLLECT: the functions whose instructions count (callgrind's --toggle-collect; a
# space-separated list, and one nested in another toggles it off), by default `Drive`'s
# poll, which every connection's task runs and where every request runs (until 0c8a407
# it was `accept_loop`, whose async blocks were the tasks; plain connections' tasks are
# now `server::Open`, which inlines its poll):
# start-up is left out, whose clock calibration (quanta's) runs a timing-dependent number
# of loops and made the whole-program figure swing by -5% to +24% between runs of one
# binary. COLLECT=all counts the whole program (the scheduler's share too). COLLECT_TLS:
# the same for h2-1k (see below).
set -euo pipefail

NEW=${1:?usage: bench/instructions.sh NEW_BINARY BASE_BINARY}
BASE=${2:?usage: bench/instructions.sh NEW_BINARY BASE_BINARY}
SCENARIOS=${SCENARIOS:-static-1k proxy-1k h2-1k}
N=${N:-6000}
SMALL=${SMALL:-1000}
CONNECTIONS=${CONNECTIONS:-8}
COLLECT=${COLLECT:-*server::Drive<*}
# A TLS connection's Drive is inlined into its task, the async block accept_loop spawns
# (no `Drive<…>::poll` of its own in the binary: h2-1k counted 0 instructions), and
# hyper's HTTP/2 streams are polled inside it (server::InlineFirst). By default h2-1k
# counts that task instead.
TLS_TASK='*server::accept_loop::{{closure}}::{{closure}}'
COLLECT_TLS=${COLLECT_TLS:-$TLS_TASK}
# h3-1k (oha's HTTP/3) runs in several tasks a connection (quinn's endpoint and connection
# drivers, h3's connection, its requests'): COLLECT_H3 counts every task the runtime runs.
COLLECT_H3=${COLLECT_H3:-*current_thread::Context::run_task}
OHA=${OHA:-$(command -v oha || echo "$HOME/.cargo/bin/oha")}
PORT=18581 ADMIN=18582 TLS=18583 BACKEND=18591 BACKEND_ADMIN=18592
CACHE_BACKEND=18593 CACHE_BACKEND_ADMIN=18594

for t in valgrind callgrind_annotate openssl curl; do
  command -v "$t" > /dev/null || { echo "instructions.sh: $t not found" >&2; exit 1; }
done
[ -x "$OHA" ] || { echo "instructions.sh: oha not found (cargo install oha --locked)" >&2; exit 1; }

WORK=$(mktemp -d /tmp/gatehouse-instructions.XXXXXX)
PIDS=()
stop_all() {
  local p
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -TERM "$p" 2> /dev/null || true; done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2> /dev/null || true; done
  PIDS=()
}
trap 'stop_all; rm -rf "$WORK"' EXIT

mkdir -p "$WORK/www"
head -c 1024 /dev/urandom > "$WORK/www/1k.bin"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj /CN=localhost -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2> /dev/null

wait_up() { # url
  for _ in $(seq 1 600); do
    curl -skf -o /dev/null "$1" && return 0
    sleep 0.1
  done
  echo "instructions.sh: nothing answered at $1" >&2
  return 1
}

"$BASE" --root "$WORK/www" --listen "127.0.0.1:$BACKEND" --admin-listen "127.0.0.1:$BACKEND_ADMIN" \
  2> "$WORK/backend.log" &
PIDS+=($!)
wait_up "http://127.0.0.1:$BACKEND/1k.bin"
# cache-1k's backend marks its answers fresh for ten minutes, as bench/run.sh's nginx does.
# Under /v/ it also sends `Vary: Accept-Encoding`, as most origins do (cache-vary-1k).
printf '%s\n' "root = \"$WORK/www\"" "listen = \"127.0.0.1:$CACHE_BACKEND\"" \
  "admin_listen = \"127.0.0.1:$CACHE_BACKEND_ADMIN\"" '[[routes]]' '[routes.static]' '[[routes.headers.response]]' \
  'set = { "Cache-Control" = "max-age=600" }' '[[routes]]' 'path = "/v"' '[routes.static]' \
  '[[routes.headers.response]]' 'set = { "Cache-Control" = "max-age=600", "Vary" = "Accept-Encoding" }' \
  > "$WORK/cache-backend.toml"
"$BASE" --config "$WORK/cache-backend.toml" 2> "$WORK/cache-backend.log" &
PIDS+=($!)
wait_up "http://127.0.0.1:$CACHE_BACKEND/1k.bin"

config() { # scenario
  cat << EOF
root = "$WORK/www"
listen = "127.0.0.1:$PORT"
admin_listen = "127.0.0.1:$ADMIN"
workers = 1
EOF
  case "$1" in
    h2-1k | h3-1k) printf '[tls]\nlisten = "127.0.0.1:%s"\nhttp3 = %s\n[[tls.certs]]\ncert = "%s"\nkey = "%s"\n' \
      "$TLS" "$([ "$1" = h3-1k ] && echo true || echo false)" "$WORK/cert.pem" "$WORK/key.pem" ;;
  esac
  case "$1" in
    proxy-1k) printf '[[routes]]\n[routes.proxy]\nupstreams = ["http://127.0.0.1:%s"]\n' "$BACKEND" ;;
    # All hits after the first request, as in bench/run.sh.
    cache-1k | cache-vary-1k) printf '[[routes]]\n[routes.proxy]\nupstreams = ["http://127.0.0.1:%s"]\n[routes.cache]\nmax_bytes = 268435456\n' "$CACHE_BACKEND" ;;
    *) printf '[[routes]]\n[routes.static.open_file_cache]\nstrict = false\nvalid = "1s"\n' ;;
  esac
  # As bench/run.sh's: three response header rules, CORS and request IDs; a redirect.
  case "$1" in
    rules-1k) printf '%s\n' '[[routes.headers.response]]' \
      'set = { "X-Frame-Options" = "DENY", "X-Content-Type-Options" = "nosniff", "Referrer-Policy" = "no-referrer" }' \
      '[routes.cors]' 'allow_origins = ["https://app.example.test"]' 'allow_credentials = true' \
      '[routes.request_id]' ;;
    redirect) printf '[[routes.redirects]]\nexact = "/old"\nto = "/1k.bin"\n' ;;
    # rules-1k's parts alone, for where its cost goes.
    headers-1k) printf '%s\n' '[[routes.headers.response]]' \
      'set = { "X-Frame-Options" = "DENY", "X-Content-Type-Options" = "nosniff", "Referrer-Policy" = "no-referrer" }' ;;
    cors-1k) printf '%s\n' '[routes.cors]' 'allow_origins = ["https://app.example.test"]' 'allow_credentials = true' ;;
    request-id-1k) printf '[routes.request_id]\n' ;;
  esac
}

# Total instructions of one run of `bin` serving `n` requests of `scenario`.
count() { # bin scenario n
  local bin=$1 scenario=$2 n=$3 url args=() out="$WORK/cg.out"
  config "$scenario" > "$WORK/g.toml"
  url="http://127.0.0.1:$PORT/1k.bin"
  if [ "$scenario" = h2-1k ]; then
    url="https://127.0.0.1:$TLS/1k.bin"
    args=(--insecure --http2 -p 4)
  fi
  if [ "$scenario" = h3-1k ]; then
    url="https://127.0.0.1:$TLS/1k.bin"
    args=(--insecure --http-version 3 -p 4)
  fi
  case "$scenario" in rules-1k | cors-1k) args=(-H "Origin: https://app.example.test") ;; esac
  [ "$scenario" = cache-vary-1k ] && url="http://127.0.0.1:$PORT/v/1k.bin"
  local asked=$url
  [ "$scenario" = redirect ] && asked="http://127.0.0.1:$PORT/old" args=(--redirect 0)
  rm -f "$out"
  local collect=()
  local pattern=$COLLECT
  [ "$scenario" = h2-1k ] && [ "$COLLECT" != all ] && pattern=$COLLECT_TLS
  [ "$scenario" = h3-1k ] && [ "$COLLECT" != all ] && pattern=$COLLECT_H3
  if [ "$pattern" != all ]; then
    local c pats
    read -r -a pats <<< "$pattern"
    for c in "${pats[@]}"; do collect+=(--toggle-collect="$c"); done
  fi
  valgrind --tool=callgrind "${collect[@]}" --callgrind-out-file="$out" "$bin" --config "$WORK/g.toml" \
    2> "$WORK/valgrind.log" &
  local pid=$!
  PIDS+=("$pid")
  wait_up "$url"
  "$OHA" -n "$n" -c "$CONNECTIONS" --no-tui --disable-compression "${args[@]}" "$asked" > /dev/null
  kill -TERM "$pid"
  wait "$pid" 2> /dev/null || true
  PIDS=("${PIDS[0]}" "${PIDS[1]}")
  [ -n "${CG_DIR:-}" ] && cp "$out" "$CG_DIR/$(basename "$bin")-$scenario-$n.out"
  sed -n 's/^summary: *//p' "$out"
}

printf '| scenario | base Ir/request | new Ir/request | new/base |\n|---|---:|---:|---:|\n'
for s in $SCENARIOS; do
  per=()
  for bin in "$BASE" "$NEW"; do
    long=$(count "$bin" "$s" "$N")
    short=$(count "$bin" "$s" "$SMALL")
    per+=($(( (long - short) / (N - SMALL) )))
  done
  awk -v s="$s" -v b="${per[0]}" -v n="${per[1]}" \
    'BEGIN { printf "| %s | %d | %d | %.3f |\n", s, b, n, n / b }'
done
