#!/usr/bin/env bash
# Runs the CUDA certification on the GPU machine (no network, no Rust): installs the carried abi3
# wheel with --no-deps into a venv that sees the system torch / JAX / numpy, runs
# scripts/certify_gpu.py, and leaves the JSON + markdown under $OUT (default ./certify-out).
#
#   bash scripts/device_run.sh [path/to/loaderx-*.whl] [extra certify_gpu.py args...]
set -euo pipefail
OUT="${OUT:-$PWD/certify-out}"
WHEEL="${1:-$(ls dist/loaderx-*-abi3-*.whl 2>/dev/null | head -n1)}"
shift || true
if [[ -z "${WHEEL}" || ! -f "${WHEEL}" ]]; then
    echo "device_run.sh: no wheel given and none in dist/" >&2
    exit 2
fi
PY="${PYTHON:-python3}"
VENV="$(mktemp -d)/venv"
"$PY" -m venv --system-site-packages "$VENV"
"$VENV/bin/python" -m pip install -q --no-deps --no-index "$WHEEL"
mkdir -p "$OUT"
LOADERX_COMMIT="${LOADERX_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" \
    "$VENV/bin/python" scripts/certify_gpu.py --out "$OUT" "$@" 2>&1 | tee "$OUT/certify_gpu.log"
