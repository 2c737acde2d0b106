#!/usr/bin/env bash
# Fuzzes gatehouse's parsers and policy checks with cargo-fuzz (libFuzzer + AddressSanitizer)
# on the stable toolchain: every target in fuzz/ (or those named), each for FUZZ_SECONDS.
#
#   scripts/fuzz.sh                        # all targets, 30 s each
#   scripts/fuzz.sh range jwt              # only these
#   FUZZ_SECONDS=600 scripts/fuzz.sh       # longer runs
#   cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run range   # one target until stopped
#
# Exits non-zero if any target crashes (a panic, a failed property, a sanitizer report, a
# timeout); its input is kept in fuzz/artifacts/<target>/ and can be replayed with
#   cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run <target> artifacts/<target>/<file>
# Prints each target's executions and executions per second from libFuzzer's final stats.
#
# The seeds in fuzz/corpus/<target>/ are only read: what libFuzzer adds goes to a temporary
# directory that is removed at the end. Builds go to fuzz/target (a cold build takes about
# 8 minutes on 2 cores). cargo-fuzz is installed if missing; a C++ compiler (g++) is needed
# to build libFuzzer.
#
# RUSTC_BOOTSTRAP=1 lets stable rustc take the -Z flags cargo-fuzz passes
# (-Zsanitizer=address); no nightly toolchain is involved.
#
# FUZZ_BUILD: more `cargo fuzz build` options, for the build and every run alike. The test
# command's short runs use "--sanitizer none --codegen-units 16": cargo-fuzz builds with
# one codegen unit and AddressSanitizer by default, and that build was 616 of the stage's
# 732 s (stop 43's CI run) for 10 s of fuzzing per target; this one took 487 s (69b00c8's)
# and runs about 5x the executions a second (route_forward: 60,981 against 12,730). The
# properties and panics are still checked; what ASan adds (gatehouse's own code has little
# `unsafe`) is for longer runs with the default build. A `--dev` build took 306 s but ran
# route_forward at 3,756 a second.
set -euo pipefail

cd "$(dirname "$0")/../fuzz"
seconds=${FUZZ_SECONDS:-30}
read -r -a build_args <<< "${FUZZ_BUILD:-}"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi
if ! command -v c++ >/dev/null 2>&1 && ! command -v g++ >/dev/null 2>&1; then
    echo "fuzz.sh: libFuzzer needs a C++ compiler (apt-get install -y g++)" >&2
    exit 2
fi

if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi

echo "== building ${#targets[@]} fuzz targets"
start=$(date +%s)
if [ $# -gt 0 ]; then
    for t in "${targets[@]}"; do cargo fuzz build "${build_args[@]}" "$t"; done
else
    cargo fuzz build "${build_args[@]}"
fi
echo "== built in $(($(date +%s) - start)) s"

work=$(mktemp -d "${TMPDIR:-/tmp}/gatehouse-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
# The targets' fixtures (a file tree, key files) go here too, and so away at the end.
export TMPDIR=$work

failed=()
summary=()
for t in "${targets[@]}"; do
    echo "== $t: ${seconds} s"
    mkdir -p "$work/corpus/$t"
    seeds=()
    [ -d "corpus/$t" ] && seeds=("corpus/$t")
    log="$work/$t.log"
    status=0
    cargo fuzz run "${build_args[@]}" "$t" "$work/corpus/$t" "${seeds[@]}" -- \
        -max_total_time="$seconds" -timeout=10 -print_final_stats=1 >"$log" 2>&1 || status=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    corpus=$(find "$work/corpus/$t" -type f | wc -l)
    if [ "$status" -ne 0 ]; then
        failed+=("$t")
        summary+=("$(printf '%-16s CRASH (exit %s) after %s executions' "$t" "$status" "${runs:-?}")")
        echo "!! $t failed; the end of its log:"
        grep -v '^#' "$log" | tail -40
        ls -1 "artifacts/$t" 2>/dev/null | sed "s|^|   artifact: fuzz/artifacts/$t/|" | tail -5
    else
        summary+=("$(printf '%-16s %12s executions  %8s exec/s  corpus %s' "$t" "${runs:-?}" "${rate:-?}" "$corpus")")
    fi
done

echo
echo "== fuzzing, ${seconds} s per target"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
    echo "== FAILED: ${failed[*]}"
    exit 1
fi
echo "== no crash in ${#targets[@]} targets"
