#!/usr/bin/env bash
# The gate's pass rate on an unchanged tree (an A/A run): the harness of this working tree
# built once and gated against itself N times (default 20), each decision on its own fresh
# pairs with its own seed, the way scripts/ci-gate.sh runs it. The decisions go to
# cache/gate-pass-rate/<k>/decision.json, the summary to results/gate/pass-rate.json.
#   usage: bash scripts/gate_pass_rate.sh [N]   (LOADERX_GATE_PAIRS: pairs per path, default 12;
#          LOADERX_GATE_HARNESS: a harness built from this tree, instead of building it)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
runs=${1:-20}
pairs=${LOADERX_GATE_PAIRS:-12}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
out="$root/cache/gate-pass-rate"
rm -rf "$out"
if [ -n "${LOADERX_GATE_HARNESS:-}" ]; then
  # A harness already built from this tree (while another build holds the target directory).
  mkdir -p "$out" && cp "$LOADERX_GATE_HARNESS" "$out/harness"
else
  bash scripts/gate_build.sh "$root" "$out/harness"
fi
corpora=${LOADERX_CORPORA:-$root/../shared/corpora}
args=()
if [ -d "$corpora/oxford-pet" ]; then args+=(--pets "$corpora/oxford-pet"); fi
if [ -d "$corpora/text" ]; then args+=(--text "$corpora/text"); fi
start=$SECONDS
for k in $(seq 1 "$runs"); do
  "$out/harness" gate "$out/harness" "$out/harness" --pairs "$pairs" --seed "$k" \
    --out "$out/$k" --label-baseline "$(git rev-parse HEAD)" --label-candidate same "${args[@]}" |
    grep -E '^gate: (PASS|FAIL|[a-z-]+ \()' || true
done
python3 - "$out" "$runs" "$pairs" "$((SECONDS - start))" <<'PY'
import json, sys
out, runs, pairs, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ds = [json.load(open(f"{out}/{k}/decision.json")) for k in range(1, runs + 1)]
paths = list(dict.fromkeys(v["path"] for v in ds[0]["verdicts"]))
summary = {
    "schema": "loaderx-gate-pass-rate/1",
    "command": f"bash scripts/gate_pass_rate.sh {runs}  (LOADERX_GATE_PAIRS={pairs})",
    "what": "A/A: one build of the tree gated against itself; each decision on its own pairs",
    "runs": runs,
    "pairs_per_path": pairs,
    # The deciding verdicts (older decision files lack the flag: their CPU ones decide).
    "passed": sum(
        not d["fact"] and all(v["pass"] for v in d["verdicts"] if v.get("deciding", v["metric"] == "cpu"))
        for d in ds
    ),
    "wall_verdicts_below": sum(not v["pass"] for d in ds for v in d["verdicts"] if v["metric"] == "wall"),
    "seconds": secs,
    "rule": ds[0]["rule"],
    "per_path": {
        p: {
            m: {
                "failed": sum(not v["pass"] for d in ds for v in d["verdicts"] if (v["path"], v["metric"]) == (p, m)),
                "median_ratios": [round(v["median_ratio"], 4) for d in ds for v in d["verdicts"] if (v["path"], v["metric"]) == (p, m)],
                "upper_bounds": [v["upper_bound"] and round(v["upper_bound"], 4) for d in ds for v in d["verdicts"] if (v["path"], v["metric"]) == (p, m)],
                "lowest_ratio": round(min(x[m + "_ratio"] for d in ds for x in d["pairs"] if x["path"] == p), 4),
            }
            for m in ("cpu", "wall")
        }
        for p in paths
    },
    "facts": [d["fact"] for d in ds if d["fact"]],
}
json.dump(summary, open("results/gate/pass-rate.json", "w"), indent=2)
print(f"gate_pass_rate: {summary['passed']} of {runs} passed in {secs} s")
PY
