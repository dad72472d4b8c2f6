#!/usr/bin/env bash
# usage: CARGO_TARGET_DIR=DIR bash scripts/gate_build.sh TREE OUT: builds TREE's release harness
# in the target directory every gated tree shares and copies it to OUT before the next build.
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
