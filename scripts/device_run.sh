#!/usr/bin/env bash
# The GPU machine's one command (no network, no Rust, no pip downloads): installs the carried abi3
# wheel with `pip install --no-deps --target` into a temporary folder put first on PYTHONPATH (the
# machine's own torch / JAX / NumPy / ml_dtypes are used as they are), then runs the CUDA
# certification (scripts/certify_gpu.py) and the GPU loader table (scripts/gpu_loader_table.py),
# each within its own time budget, one progress line per check or run.
#
#   LOADERX_COMMIT=<sha> bash scripts/device_run.sh [path/to/loaderx-*.whl] [--quick]
#
# Writes under $OUT (default ./certify-out): certify_gpu.{json,md}, gpu_loader_table.{json,md} and
# device_run.log (everything printed). The commit in the receipts is $LOADERX_COMMIT, else the
# first line of a COMMIT file next to the wheel, else `git rev-parse HEAD`.
# Budgets (seconds): CERTIFY_BUDGET_S (150), TABLE_BUDGET_S (360); checks or runs not started by
# then are NOT RUN, so the whole command ends within ~9 min. A partial rerun: CERTIFY=0 skips the
# certification, TABLE_ONLY=vision,tokens,spdl (any subset) picks table parts, --quick uses
# smaller data (same 3 fresh-process repeats per row).
# Exit status: 0 everything passed; 1 a check or row failed or did not run; 2 no usable CUDA
# device, or no wheel.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/certify-out}"
mkdir -p "$OUT"
exec > >(tee -a "$OUT/device_run.log") 2>&1

WHEEL=""
QUICK=()
for a in "$@"; do
    case "$a" in
        --quick) QUICK=(--quick) ;;
        *) WHEEL="$a" ;;
    esac
done
if [[ -z "$WHEEL" ]]; then
    WHEEL="$(ls dist/loaderx-*-abi3-*.whl 2>/dev/null | head -n1)"
fi
if [[ -z "$WHEEL" || ! -f "$WHEEL" ]]; then
    echo "device_run: no wheel given and none in dist/" >&2
    exit 2
fi
if [[ -z "${LOADERX_COMMIT:-}" && -f "$(dirname "$WHEEL")/COMMIT" ]]; then
    LOADERX_COMMIT="$(head -n1 "$(dirname "$WHEEL")/COMMIT")"
fi
export LOADERX_COMMIT="${LOADERX_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
PY="${PYTHON:-python3}"
echo "device_run: $(date -u +%Y-%m-%dT%H:%M:%SZ) wheel=$WHEEL commit=$LOADERX_COMMIT quick=${QUICK[*]:-no}"

SITE="$(mktemp -d)/site"
if ! "$PY" -m pip install -q --no-deps --no-index --target "$SITE" "$WHEEL"; then
    # A wheel is a zip whose root is the install layout: unpacking it is what --target does.
    echo "device_run: pip could not install $WHEEL; unpacking it into $SITE instead" >&2
    "$PY" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$WHEEL" "$SITE" || exit 2
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import loaderx, numpy, sys; print('device_run: loaderx', loaderx.__version__, 'from', loaderx.__file__, '| numpy', numpy.__version__, '| python', sys.version.split()[0])" || exit 2
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv || true

start=$SECONDS
certify=0
if [[ "${CERTIFY:-1}" != 0 ]]; then
    "$PY" scripts/certify_gpu.py --out "$OUT" --require-gpu --budget-s "${CERTIFY_BUDGET_S:-150}" "${QUICK[@]}"
    certify=$?
    echo "device_run: certify_gpu.py exited $certify after $((SECONDS - start)) s"
    if [[ $certify == 2 ]]; then
        echo "device_run: no usable CUDA device: nothing else to run" >&2
        exit 2
    fi
fi
"$PY" scripts/gpu_loader_table.py --out "$OUT" --require-gpu --budget-s "${TABLE_BUDGET_S:-360}" \
    --only "${TABLE_ONLY:-vision,tokens,spdl}" "${QUICK[@]}"
table=$?
echo "device_run: gpu_loader_table.py exited $table; total $((SECONDS - start)) s; results in $OUT"
if [[ $table == 2 ]]; then
    exit 2
fi
if [[ $certify != 0 || $table != 0 ]]; then
    exit 1
fi
exit 0
