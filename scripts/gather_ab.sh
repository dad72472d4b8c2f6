#!/usr/bin/env bash
# A/B of the gather between two commits, interleaved: `bash scripts/gather_ab.sh BASE [HEAD] [PAIRS]`.
# Builds scripts/gather_ab (public API only) against each commit in a temporary worktree, then runs
# the two builds in alternating order (ABBA...) PAIRS times (default 16) over the same stores and
# prints, per arm, the median of the per-pair ratios HEAD / BASE and their interquartile range.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=$1; head=${2:-HEAD}; pairs=${3:-16}
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/a" 2>/dev/null || true; git -C "$root" worktree remove --force "$work/b" 2>/dev/null || true; rm -rf "$work"' EXIT
for side in a b; do
  rev=$base; [ $side = b ] && rev=$head
  git -C "$root" worktree add -q --detach "$work/$side" "$rev"
  mkdir -p "$work/$side-ab"
  cp -r "$root/scripts/gather_ab/src" "$work/$side-ab/"
  sed "s#\.\./\.\./#$work/$side/#" "$root/scripts/gather_ab/Cargo.toml" >"$work/$side-ab/Cargo.toml"
  cp "$work/$side/Cargo.lock" "$work/$side-ab/"
  echo "gather_ab: building against $rev"
  CARGO_TARGET_DIR="$work/$side-target" cargo build -q --release --manifest-path "$work/$side-ab/Cargo.toml"
done
for i in $(seq 1 "$pairs"); do
  order="a b"; [ $((i % 2)) = 0 ] && order="b a"
  for side in $order; do
    "$work/$side-target/release/gather_ab" "$work/stores" 7 | sed "s/^/$side $i /"
  done
done >"$work/runs.txt"
python3 - "$work/runs.txt" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(lambda: collections.defaultdict(dict))
for line in open(sys.argv[1]):
    side, pair, arm, mib = line.split()
    runs[arm][pair][side] = float(mib)
print(f"{'arm':16} {'base MiB/s':>10} {'head MiB/s':>10} {'head/base':>9}  IQR")
for arm, pairs in runs.items():
    r = sorted(p["b"] / p["a"] for p in pairs.values())
    q = len(r) // 4
    a = statistics.median(p["a"] for p in pairs.values())
    b = statistics.median(p["b"] for p in pairs.values())
    print(f"{arm:16} {a:10.0f} {b:10.0f} {statistics.median(r):9.3f}  {r[q]:.3f}-{r[-q-1]:.3f}")
PY
