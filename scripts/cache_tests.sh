#!/usr/bin/env bash
# Runs the outside HTTP-caching suite (cache-tests.fyi: the npm package http-cache-tests,
# by Mark Nottingham) against a gatehouse cached proxy route, and against nginx's
# proxy_cache for comparison. Fails when gatehouse fails a required test that
# scripts/cache_tests_allowed.txt does not name with its reason. The proxies listen on
# loopback; the suite's origin server listens on its port on every interface.
#   GATEHOUSE  the binary (default target/release/gatehouse)
#   SUITE_DIR  an installed http-cache-tests (default: installed under ~/.cache)
#   OUT        where the JSON results go (default: a temporary directory)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
GATEHOUSE=${GATEHOUSE:-$root/target/release/gatehouse}
version=0.4.5
if [ -z "${SUITE_DIR:-}" ]; then
  tools="$HOME/.cache/gatehouse-tools/cache-tests-$version"
  if [ ! -f "$tools/node_modules/http-cache-tests/cli.mjs" ]; then
    echo "== installing http-cache-tests $version (npm)"
    mkdir -p "$tools"
    npm install --silent --prefix "$tools" "http-cache-tests@$version" > /dev/null
    [ -f "$tools/node_modules/http-cache-tests/cli.mjs" ] \
      || { echo "npm did not install http-cache-tests $version" >&2; exit 1; }
  fi
  SUITE_DIR=$tools/node_modules/http-cache-tests
fi
work=$(mktemp -d)
chmod 755 "$work"
OUT=${OUT:-$work}
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

origin=18710 gh=18711 ngx=18712 admin=18713
(cd "$SUITE_DIR" && exec env npm_config_port=$origin npm_config_protocol=http \
  npm_config_pidfile="$work/origin.pid" node server/server.mjs) > "$work/origin.log" 2>&1 &
pids+=($!)

# Compression is off: its `Vary: Accept-Encoding` would make the suite's Vary tests fail
# their setup (they compare the whole Vary field). stale_if_error is on so that the
# suite's stale-close check passes and the tests that depend on it (must-revalidate,
# no-cache, s-maxage forbid stale use) are judged at all.
cat > "$work/gatehouse.toml" << TOML
listen = ["127.0.0.1:$gh"]
admin_listen = "127.0.0.1:$admin"
[[routes]]
path = "/"
[routes.proxy]
upstreams = ["http://127.0.0.1:$origin"]
[routes.compression]
enabled = false
[routes.cache]
stale_if_error = "1m"
TOML
"$GATEHOUSE" --config "$work/gatehouse.toml" > "$work/gatehouse.log" 2>&1 &
pids+=($!)

# The suite's own nginx configuration (docker/nginx/nginx.conf).
cat > "$work/nginx.conf" << NGINX
daemon off;
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events {}
http {
  access_log off;
  proxy_cache_path $work/ngx-cache levels=1:2 keys_zone=my-cache:8m max_size=1000m inactive=600m;
  proxy_temp_path $work/ngx-tmp;
  client_body_temp_path $work/ngx-tmp;
  server {
    listen 127.0.0.1:$ngx;
    location / {
      proxy_pass http://127.0.0.1:$origin;
      proxy_cache my-cache;
      proxy_cache_revalidate on;
    }
  }
}
NGINX
nginx -c "$work/nginx.conf" -e "$work/nginx-error.log" > "$work/nginx.log" 2>&1 &
pids+=($!)

for port in $origin $gh $ngx; do
  for _ in $(seq 1 100); do
    curl -s -o /dev/null "http://127.0.0.1:$port/" && continue 2
    sleep 0.1
  done
  echo "nothing answered on 127.0.0.1:$port" >&2
  cat "$work"/*.log >&2
  exit 1
done

run() {
  (cd "$SUITE_DIR" && timeout 600 env npm_config_base="http://127.0.0.1:$1" \
    npm_package_config_id= node --no-warnings cli.mjs) > "$OUT/$2.json"
}
run $gh gatehouse &
gh_run=$!
run $ngx nginx
wait $gh_run
echo "== cache-tests.fyi $version: results that are not a pass (gatehouse, nginx)"
node "$root/scripts/cache_tests_summary.mjs" "$SUITE_DIR" "$root/scripts/cache_tests_allowed.txt" \
  "$OUT/gatehouse.json" "$OUT/nginx.json"
