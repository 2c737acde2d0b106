#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine, then runs them all:
# formatting, clippy, every crate's unit, integration and doc tests, and a short run of the
# benchmark against nginx and Caddy that checks its output. `.ci/run` calls this.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

need_apt=()
command -v nginx > /dev/null || need_apt+=(nginx)
command -v caddy > /dev/null || need_apt+=(caddy)
command -v curl > /dev/null || need_apt+=(curl)
command -v openssl > /dev/null || need_apt+=(openssl)
# The ACME tests run against a real CA: Pebble and its DNS test server, from Debian.
command -v pebble > /dev/null && command -v pebble-challtestsrv > /dev/null || need_apt+=(pebble)
# The metrics tests run the shipped Prometheus files in a real Prometheus, check them with
# promtool, and validate the compose file with docker-compose (no Docker engine needed).
command -v prometheus > /dev/null && command -v promtool > /dev/null || need_apt+=(prometheus)
command -v docker-compose > /dev/null || need_apt+=(docker-compose)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== installing ${need_apt[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" > /dev/null
fi
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v oha > /dev/null; then
  echo "== installing oha (a few minutes)"
  cargo install oha --locked --quiet
fi

echo "== cargo fmt"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo test"
cargo test --workspace
echo "== bench smoke test"
cargo build --release --quiet
bash bench/smoke.sh
