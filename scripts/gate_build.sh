#!/usr/bin/env bash
# Builds the release harness of the tree TREE into $CARGO_TARGET_DIR (shared by every tree the
# gate builds: only the workspace crates build again) and copies the executable to OUT, before
# the next tree's build replaces it there.
#   usage: CARGO_TARGET_DIR=DIR bash scripts/gate_build.sh TREE OUT
set -euo pipefail
tree=$1
out=$2
: "${CARGO_TARGET_DIR:?set CARGO_TARGET_DIR: the target directory the builds share}"
start=$SECONDS
(cd "$tree" && cargo build --release -q -p harness)
mkdir -p "$(dirname "$out")"
cp "$CARGO_TARGET_DIR/release/harness" "$out.tmp"
mv "$out.tmp" "$out"
echo "gate_build: $tree -> $out in $((SECONDS - start)) s"
