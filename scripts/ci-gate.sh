#!/usr/bin/env bash
# CI regression gate: the quick benchmark matrix on the shared corpora, then the gate against the
# committed baseline (fails on any unverified cell, on zrecord falling over 20 % behind a peer it beat in the
# baseline, or on a zrecord-raw x_memcpy drop of more than 25 %; see harness/src/gate.rs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out="$root/cache/ci-quick"
rm -rf "$out"
bash scripts/bench.sh --quick --out "$out"
cargo run --release -q -p harness -- gate results/baseline-quick.json "$out/results.json"
