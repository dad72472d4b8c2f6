#!/usr/bin/env bash
# CI regression gate: the candidate (this working tree) against the baseline commit named in
# results/gate/baseline-commit, both built here (the baseline in a git worktree sharing the target
# directory) and measured in interleaved A/B pairs by `harness gate`, which prints every pair and
# the decision and writes them to cache/gate/decision.json (method: results/gate/README.md).
# Environment: LOADERX_GATE_PAIRS (pairs per path, default 12), LOADERX_GATE_SEED (default: the
# clock), LOADERX_CORPORA (default ../shared/corpora; without it the quick corpora are synthetic).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$SECONDS
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
out="$root/cache/gate"
mkdir -p "$out"
base=$(tr -d '[:space:]' < results/gate/baseline-commit)
# The candidate's label: HEAD's full hash, with "+changes" when tracked files differ from it.
candidate=$(git describe --always --abbrev=40 --dirty=+changes --exclude='*')
tree="$out/baseline-tree"
drop_tree() {
  git worktree remove --force "$tree" 2>/dev/null || rm -rf "$tree"
  git worktree prune
}
drop_tree
bash scripts/gate_build.sh "$root" "$out/harness-candidate"
git worktree add --detach --quiet "$tree" "$base"
bash scripts/gate_build.sh "$tree" "$out/harness-baseline"
drop_tree
# The last build left the baseline's executable in the shared target directory: put the
# candidate's back, so a later `cargo run -p harness` here runs this tree's code.
cp "$out/harness-candidate" "$CARGO_TARGET_DIR/release/harness"
# The baseline build also left its workspace crates' artifacts there, newer than this tree's
# sources (seen: a later cargo build here linked the baseline's competitors and failed to
# compile). Touching the sources makes the next build here compile them again.
find zrecord loaderx competitors harness benchkit datasets -name '*.rs' -exec touch {} +
echo "ci-gate: builds took $((SECONDS - start)) s"
corpora=${LOADERX_CORPORA:-$root/../shared/corpora}
args=(--pairs "${LOADERX_GATE_PAIRS:-12}" --seed "${LOADERX_GATE_SEED:-$(date +%s)}" --out "$out")
if [ -d "$corpora/oxford-pet" ]; then args+=(--pets "$corpora/oxford-pet"); fi
if [ -d "$corpora/text" ]; then args+=(--text "$corpora/text"); fi
rc=0
"$out/harness-candidate" gate "$out/harness-baseline" "$out/harness-candidate" \
  --label-baseline "$base" --label-candidate "$candidate" "${args[@]}" || rc=$?
echo "ci-gate: done in $((SECONDS - start)) s (exit $rc)"
exit "$rc"
