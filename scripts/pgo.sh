#!/usr/bin/env bash
# Builds gatehouse with profile-guided optimisation, to target/pgo/release/gatehouse:
#   1. an instrumented build (target/pgo-gen), which counts branches and calls as it runs;
#   2. training: that build runs bench/run.sh's scenarios (static files small and large, gzip,
#      proxy, TLS, HTTP/2, access log, basic auth, idle connections) for a few seconds each,
#      against loopback only, and writes its counts when it exits (gatehouse alone: nginx
#      and Caddy would add time and nothing to the profile);
#   3. the counts are merged with llvm-profdata, and gatehouse is built again using them, so
#      LLVM inlines and lays out code for the paths requests take.
# Measured with callgrind on a proxied request: 24,025 user instructions for the plain
# release build, 19,060 for this one (docs/src/deployment.md, "Profile-guided build").
#
# Needs what bench/run.sh needs for gatehouse (oha, openssl, python3) and an llvm-profdata from the
# same LLVM major version as rustc's: LLVM_PROFDATA, rustup's llvm-tools, llvm-profdata-N or
# /usr/lib/llvm-N/bin/llvm-profdata (Debian: apt-get install llvm-N). TRAIN_DURATION (3s) is
# each scenario's length; bench/run.sh's other settings are its defaults, whatever the caller
# has set. RUSTFLAGS and CARGO_PROFILE_RELEASE_* settings the caller set apply to both
# builds. A plain `cargo build --release` is untouched. PGO_CHECK=1 stops after checking
# the tools (rustc's LLVM, an llvm-profdata of that version), building nothing: what the
# test command runs, as the builds and training took 13 min of its 45-min budget.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
[ -n "$major" ] || { echo "pgo.sh: rustc -vV names no LLVM version" >&2; exit 1; }
profdata=${LLVM_PROFDATA:-}
if [ -z "$profdata" ]; then
  for c in "$(rustc --print sysroot)"/lib/rustlib/*/bin/llvm-profdata \
    "$(command -v "llvm-profdata-$major" || true)" "/usr/lib/llvm-$major/bin/llvm-profdata"; do
    [ -n "$c" ] && [ -x "$c" ] && { profdata=$c; break; }
  done
fi
[ -n "$profdata" ] || {
  echo "pgo.sh: no llvm-profdata for LLVM $major (rustc's): apt-get install llvm-$major," \
    "or rustup component add llvm-tools, or set LLVM_PROFDATA" >&2
  exit 1
}
have=$("$profdata" --version | sed -n 's/.*LLVM version \([0-9]*\).*/\1/p')
[ "$have" = "$major" ] || {
  echo "pgo.sh: $profdata is LLVM ${have:-?}, rustc is LLVM $major: its profiles would not be read" >&2
  exit 1
}

if [ "${PGO_CHECK:-}" = 1 ]; then
  echo "pgo.sh: rustc is LLVM $major, $profdata reads its profiles"
  exit 0
fi

data=$ROOT/target/pgo-data
rm -rf "$data" && mkdir -p "$data"
echo "== pgo: instrumented build (target/pgo-gen)"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$data/raw" \
  cargo build --release --locked --quiet -p gatehouse --bin gatehouse --target-dir target/pgo-gen

# Build scripts and proc macros are instrumented too, and wrote their counts while the
# build ran: only what gatehouse writes in training may go into the profile.
rm -rf "$data/raw"

echo "== pgo: training on bench/run.sh's scenarios"
env -u SCENARIOS -u ROUNDS -u CONNECTIONS -u FLOOR -u GATEHOUSE_BASE -u RUNTIME -u BASE_RUNTIME \
  -u METRICS -u BASE_METRICS -u GATEHOUSE_TOML -u BASE_TOML \
  CADDY= NGINX= DURATION=${TRAIN_DURATION:-3s} WARMUP=1s GATEHOUSE=$ROOT/target/pgo-gen/release/gatehouse \
  OUT_DIR="$data/train" bash bench/run.sh > "$data/train.log" 2>&1 \
  || { tail -20 "$data/train.log" >&2; echo "pgo.sh: the training run failed" >&2; exit 1; }
# Training that served nothing, or served errors, would tune the build for the wrong paths.
python3 - "$data/train/bench-results.json" <<'PY'
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r["server"] == "gatehouse"]
bad = [r["scenario"] for r in rows if not r["requests"] or r["errors"]]
scenarios = {r["scenario"] for r in rows}
if len(scenarios) < 10 or bad:
    sys.exit(f"pgo.sh: training served {len(scenarios)} scenarios, with no traffic or errors in: {bad}")
print(f"   {len(scenarios)} scenarios, {sum(r['requests'] for r in rows):,} requests, no errors")
PY
ls "$data"/raw/*.profraw > /dev/null 2>&1 || { echo "pgo.sh: training wrote no profile" >&2; exit 1; }
"$profdata" merge -o "$data/merged.profdata" "$data"/raw/*.profraw

echo "== pgo: optimised build (target/pgo)"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$data/merged.profdata" \
  cargo build --release --locked --quiet -p gatehouse --bin gatehouse --target-dir target/pgo
echo "   built target/pgo/release/gatehouse"
