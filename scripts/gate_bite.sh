#!/usr/bin/env bash
# The gate's bite (harness/tests/gate_bite.rs, ignored in the test tiers): scratch copies of this
# working tree whose zrecord gather, then loader batch assembly, do 25 % more work must each fail
# `harness gate` against the unmodified tree. Builds in the shared target directory; the summary
# goes to results/gate/bite.json, the log to results/gate/bite.log.
#   usage: bash scripts/gate_bite.sh   (LOADERX_GATE_PAIRS: pairs per path, default 12)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
export LOADERX_GATE_BITE_OUT="$root/cache/gate-bite"
start=$SECONDS
cargo test --release -q -p harness --test gate_bite -- --ignored --nocapture 2>&1 |
  tee "$LOADERX_GATE_BITE_OUT.log"
cp "$LOADERX_GATE_BITE_OUT/bite.json" results/gate/bite.json
grep '^gate' "$LOADERX_GATE_BITE_OUT.log" > results/gate/bite.log || true
echo "gate_bite: done in $((SECONDS - start)) s"
