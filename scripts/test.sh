#!/usr/bin/env bash
# The project's test command (README and .ci/run call exactly this).
#   1. installs system and Python dependencies (idempotent),
#   2. checks formatting and lints,
#   3. runs every Rust test in the workspace (competitor adapters included),
#   4. builds and installs the Python wheel into the venv, runs the object-storage tests against a
#      real SeaweedFS server on loopback, and the pytest suite,
#   5. runs the CI tier of the reliability suite (fuzzing) when present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export LOADERX_VENV=${LOADERX_VENV:-$root/.venv}
# maturin's PEP 517 hooks run the `maturin` executable: the venv's bin must be on PATH.
export PATH="$LOADERX_VENV/bin:$PATH"
py="$LOADERX_VENV/bin/python"

# Each step prints how long the one before it took (CI's time budget is read off these lines).
last=$SECONDS
step() { printf '\n==> %s   (previous step: %d s, total %d s)\n' "$*" $((SECONDS - last)) "$SECONDS"; last=$SECONDS; }

step "install dependencies"
bash scripts/install-deps.sh

step "cargo fmt --check"
cargo fmt --all -- --check

# One feature set for lints and tests: the workspace plus datasets' Hugging Face parquet input.
# (A separate `cargo test -p datasets --features parquet` resolved its own dependency features and
# rebuilt most of the tree: 405 s of a cold CI run.)
features=(--features datasets/parquet)

step "cargo clippy --workspace --all-targets ${features[*]} -- -D warnings"
cargo clippy --workspace --all-targets "${features[@]}" -- -D warnings
# The product crates alone, as a user builds them: in the workspace build above, feature unification
# turns on the benchmarks' `zrecord/internals`, which would hide code the library leaves unused.
step "cargo clippy -p zrecord -p loaderx --lib -- -D warnings"
cargo clippy -p zrecord -p loaderx --lib -- -D warnings

# Object storage (zrecord's `remote` feature, on in the wheel) is linted on its own: the workspace
# build leaves it off (it adds ~130 crates).
step "cargo clippy -p zrecord --features remote --all-targets -- -D warnings"
cargo clippy -p zrecord --features remote --all-targets -- -D warnings
step "cargo clippy -p harness --features remote -- -D warnings"
cargo clippy -p harness --features remote -- -D warnings

step "cargo test --workspace ${features[*]}"
cargo test --workspace "${features[@]}"

if [ -f pyproject.toml ]; then
  step "pip install . (maturin, release) + pytest"
  "$py" -m pip install -q --no-build-isolation .
  # Against a real SeaweedFS on loopback (each test starts and stops its own; one at a time).
  # Release, after the wheel: the object-store crates are already built in that profile.
  step "object-storage tests (cargo test --release -p zrecord --features remote --test remote)"
  cargo test --release -p zrecord --features remote --test remote -- --test-threads=1
  step "pytest"
  # The slowest tests are listed: CI's time budget is read off them too.
  # LOADERX_REQUIRE_RAY: test_ray.py fails (instead of skipping) when Ray is missing; ~1.5 min,
  # one local Ray for the module (2 CPUs) and a SeaweedFS of its own.
  LOADERX_REQUIRE_RAY=1 "$py" -m pytest -q --durations=12 loaderx/py/tests
fi

if [ -x scripts/reliability-ci.sh ]; then
  step "reliability CI tier"
  bash scripts/reliability-ci.sh
fi
step "all tests passed"
