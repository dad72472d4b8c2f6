#!/usr/bin/env bash
# CI regression gate: the quick benchmark matrix on the shared corpora, then the gate against the
# committed baseline of this machine's kind (results/gate/<kind>.json, built by `harness baseline`
# from three quick runs of one clean commit on that kind, its bands widened by earlier runs of the
# kind; docs/benchmarks.md names them). It fails on any unverified or failed cell, on a missing
# table or loaderx row, and on any speed-gated figure below its band. Each figure is a ratio of two
# rows' best repeats in one run (each zrecord-raw store row over its table's limit row; a loader
# table's bare gather over its limit row; each other loaderx loader row over the bare gather), and
# a band is at most 18 %, so a 25 % slower row fails (harness/src/gate.rs, gate/figures.rs).
# On a machine kind with no baseline the facts are gated and the speed rule is off (it says so).
#
# Quick cells run once, on a shared machine. A speed violation is therefore confirmed: the rows the
# gate reads in the tables that showed one (limit, zrecord-raw, loaderx rows: `--gated`) are
# measured three more times, and a figure fails only when both runs judged it below its floor (a
# real regression slows every repeat and fails both). A figure the first run could not judge (its
# cores far apart) and the confirmation put below its floor is measured once more, and that run
# decides. A wrong, failed or missing row fails at once, with no rerun.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out="$root/cache/ci-quick"
rm -rf "$out" "$out-confirm" "$out-again"
start=$SECONDS
bash scripts/bench.sh --quick --out "$out"
echo "ci-gate: quick matrix took $((SECONDS - start)) s"
gate() { cargo run --release -q -p harness -- gate results/gate "$@"; }
if gate "$out/results.json" --retry-file "$out/retry-tables.txt"; then
  exit 0
fi
tables=$(cat "$out/retry-tables.txt" 2>/dev/null || true)
if [ -z "$tables" ]; then
  echo "ci-gate: FAIL (a cell was wrong or failed: not retried)"
  exit 1
fi
echo "ci-gate: speed violation(s) in $tables: measuring those tables once more to confirm"
start=$SECONDS
bash scripts/bench.sh --quick --gated --repeats 3 --only "$tables" --out "$out-confirm"
echo "ci-gate: confirmation run took $((SECONDS - start)) s"
# A speed violation fails only where two runs that judged the figure both put it below its floor
# (harness/src/gate/confirm.rs). Exit 3: figures the first run could not judge (its cores far
# apart) were below their floor here, judged once: their tables are measured once more, and that
# run decides.
rc=0
gate "$out-confirm/results.json" --partial --first "$out/results.json" \
  --retry-file "$out-confirm/retry-tables.txt" || rc=$?
if [ "$rc" -ne 3 ]; then
  exit "$rc"
fi
tables=$(cat "$out-confirm/retry-tables.txt")
echo "ci-gate: figures judged once in $tables: measuring those tables once more"
rm -rf "$out-again"
start=$SECONDS
bash scripts/bench.sh --quick --gated --repeats 3 --only "$tables" --out "$out-again"
echo "ci-gate: second confirmation run took $((SECONDS - start)) s"
gate "$out-again/results.json" --partial --first "$out-confirm/results.json" --last
