#!/usr/bin/env bash
# Reliability suite, PR tier: the parts that are not plain `cargo test -p zrecord`.
#
#   T7 fuzzing: installs cargo-fuzz (locked), builds the targets in fuzz/ (outside the workspace)
#   on the stable toolchain (RUSTC_BOOTSTRAP=1, --sanitizer none, debug assertions on), replays the
#   committed corpus and regression inputs, then fuzzes each target for ZR_FUZZ_SECS seconds
#   (default 60), two targets at a time, with -rss_limit_mb=2048. A crash, timeout or OOM fails the
#   run; libFuzzer's artifact is kept under tgt/fuzz-artifacts/<target>/ (copy it to
#   fuzz/regressions/<target>/ once fixed).
#
# Everything else of the PR tier (T1 T2 T3 T4 T5 T8 T10, corpus replay on stable) runs in
# `cargo test -p zrecord` (see docs/reliability.md).
#
# Env: ZR_FUZZ_SECS (60), ZR_FUZZ_PARALLEL (2), ZR_FUZZ_TARGETS (all), ZR_FUZZ_TARGET_DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${ZR_FUZZ_SECS:-60}
par=${ZR_FUZZ_PARALLEL:-2}
targets=${ZR_FUZZ_TARGETS:-"open_container index_decode record_decode version_manifest"}
export CARGO_TARGET_DIR=${ZR_FUZZ_TARGET_DIR:-$root/tgt/fuzz}
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "reliability-ci: installing cargo-fuzz"
  cargo install --locked cargo-fuzz
fi

cd "$root/fuzz"
flags=(--sanitizer none --debug-assertions)
echo "reliability-ci: building fuzz targets"
for t in $targets; do cargo fuzz build "${flags[@]}" "$t"; done  # (not make_seeds, a plain bin)

art=$root/tgt/fuzz-artifacts
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$art"
fail=0

# 1. Replay the committed corpus and every regression input (each input once).
for t in $targets; do
  dirs=(corpus/$t)
  [ -d regressions/$t ] && dirs+=(regressions/$t)
  if ! cargo fuzz run "${flags[@]}" "$t" "${dirs[@]}" -- -runs=0 -rss_limit_mb=2048 -timeout=10 \
      >"$work/replay-$t.log" 2>&1; then
    echo "reliability-ci: REPLAY FAILED for $t"; tail -30 "$work/replay-$t.log"; fail=1
  else
    echo "reliability-ci: replay $t ok ($(find "${dirs[@]}" -type f | wc -l) inputs)"
  fi
done

# 2. Fuzz each target for $secs seconds, $par at a time. New inputs go to a scratch corpus.
run_one() {
  local t=$1
  mkdir -p "$work/corpus-$t" "$art/$t"
  local dirs=("$work/corpus-$t" corpus/$t)
  [ -d regressions/$t ] && dirs+=(regressions/$t)
  cargo fuzz run "${flags[@]}" "$t" "${dirs[@]}" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
    -artifact_prefix="$art/$t/" -print_final_stats=1 >"$work/fuzz-$t.log" 2>&1
}
pids=(); names=()
for t in $targets; do
  run_one "$t" & pids+=($!); names+=("$t")
  if [ ${#pids[@]} -ge "$par" ]; then
    wait "${pids[0]}" || { echo "reliability-ci: FUZZ FAILURE in ${names[0]}"; tail -40 "$work/fuzz-${names[0]}.log"; fail=1; }
    pids=("${pids[@]:1}"); names=("${names[@]:1}")
  fi
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { echo "reliability-ci: FUZZ FAILURE in ${names[$i]}"; tail -40 "$work/fuzz-${names[$i]}.log"; fail=1; }
done

printf '\n%-16s %12s %10s %8s %s\n' target execs exec/s secs result
for t in $targets; do
  log=$work/fuzz-$t.log
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  res=ok
  grep -qE 'ERROR: libFuzzer|deadly signal|panicked|out-of-memory|Timeout' "$log" && res=FAIL
  printf '%-16s %12s %10s %8s %s\n' "$t" "${execs:-?}" "${rate:-?}" "$secs" "$res"
  echo "RELIABILITY T7-fuzz target=$t execs=${execs:-0} exec_per_sec=${rate:-0} secs=$secs result=$res"
done
exit $fail
