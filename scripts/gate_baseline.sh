#!/usr/bin/env bash
# Rebuilds the CI gate's baseline for this machine's kind (CPU model and core count): three quick
# runs of the rows the gate reads (`--gated`: limit, zrecord-raw and loaderx rows), three repeats
# a cell (the gate reads each row's best repeat; ~15 minutes a run on a 2-core VM), at the
# checked-out commit (clean tree, one after another, on an otherwise idle machine), committed
# under results/, then `harness baseline` over them into results/gate/<kind>.json and
# `harness gate-bite` on the newest. results/gate/ holds one baseline per machine kind CI runs on.
#   usage: bash scripts/gate_baseline.sh [RUNS] [SPREAD_RUN/results.json ...]
#   (RUNS >= 3, default 3; SPREAD_RUN: committed quick runs of this kind from other commits or
#    VMs, which widen each figure's band (its spread) but never move its center: three runs on
#    one VM cannot show how far a fresh CI VM of the same kind moves a ratio)
# The runs are written under cache/ (ignored by git) and copied into results/ only after the last
# one: a run is publishable only from a clean tree, and results/ gaining a run would dirty it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
runs=${1:-3}
shift || true
spread=("$@")
if [ -n "$(git status --porcelain)" ]; then
  echo "gate_baseline: the tree is not clean; commit first (a baseline is built from clean runs)" >&2
  exit 2
fi
commit=$(git rev-parse --short=7 HEAD)
day=$(date -u +%Y-%m-%d)
names=()
for k in $(seq 1 "$runs"); do
  name="$day-gated-$commit-$k"
  echo "gate_baseline: quick gated run $k of $runs -> $name"
  rm -rf "cache/baseline-runs/$name"
  bash scripts/bench.sh --quick --gated --repeats 3 --out "cache/baseline-runs/$name"
  names+=("$name")
done
inputs=()
for name in "${names[@]}"; do
  rm -rf "results/$name"
  cp -r "cache/baseline-runs/$name" "results/$name"
  inputs+=("results/$name/results.json")
done
if [ ${#spread[@]} -gt 0 ]; then
  cargo run --release -q -p harness -- baseline results/gate "${inputs[@]}" --spread "${spread[@]}"
else
  cargo run --release -q -p harness -- baseline results/gate "${inputs[@]}"
fi
cargo run --release -q -p harness -- gate-bite results/gate "${inputs[-1]}"
