"""Python loader rows for the harness: runs one arm in this (fresh) process and prints one JSON line,
{"per_batch_s": s, "verified": bool, "verified_batches": n, "config": str} or {"skipped": reason}.

usage: loader_bench.py ARM KIND ZRECORD_STORE NPY_DIR DRAWS_NPY PEER_DIR BATCHES WARMUP
       loader_bench.py --digests KIND NPY_DIR DRAWS_NPY STEPS OUT_NPY
  ARM  = python-loaderx-w2 | python-loaderx-w4 | python-loaderx-w4-completion
       | torch-dataloader-w2 | torch-dataloader-w4 | torch-files-w0 | spdl-thread-w2 | spdl-thread-w4
       | spdl-process-w2 | spdl-process-w4 | grain-w2 | grain-w4 | lance-take | lance-torch-w2
       | lance-torch-w4 | streaming-w2 | streaming-w4 | litdata-w2 | litdata-w4
       | litdata-s3-w4 | streaming-s3-w4 | lance-s3-take (the remote tables: LOADERX_REMOTE_*)
  KIND = dense-vision | ragged-tokens

The arms live in harness/python/loaders/ (importable: grain and litdata spawn workers that import
the transforms). Every timed batch is checked against the source arrays after its timer. The
``--digests`` form writes the per-step batch digests the sampled peak-RAM run checks against
(``loaders.common.write_digests``), in a process of its own.
"""

import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from loaders.common import Job, emit, write_digests  # noqa: E402

# arm -> (module, the package whose absence skips the row). A worker-based loader has a row at 2
# and at 4 workers; every row delivers in step order but the loaderx ``-completion`` one.
ARMS = {
    "python-loaderx-w2": ("loaderx_arm", "loaderx"),
    "python-loaderx-w4": ("loaderx_arm", "loaderx"),
    "python-loaderx-w4-completion": ("loaderx_arm", "loaderx"),
    "torch-dataloader-w2": ("torch_arms", "torch"),
    "torch-dataloader-w4": ("torch_arms", "torch"),
    "torch-files-w0": ("torch_arms", "torch"),
    "spdl-thread-w2": ("spdl_arms", "spdl"),
    "spdl-thread-w4": ("spdl_arms", "spdl"),
    "spdl-process-w2": ("spdl_arms", "spdl"),
    "spdl-process-w4": ("spdl_arms", "spdl"),
    "grain-w2": ("grain_arms", "grain"),
    "grain-w4": ("grain_arms", "grain"),
    "lance-take": ("lance_arm", "lance"),
    "lance-torch-w2": ("lance_arm", "lance"),
    "lance-torch-w4": ("lance_arm", "lance"),
    "streaming-w2": ("streaming_arm", "streaming"),
    "streaming-w4": ("streaming_arm", "streaming"),
    "litdata-w2": ("litdata_arm", "litdata"),
    "litdata-w4": ("litdata_arm", "litdata"),
    # The object-storage tables' peers (``harness remote``), reading from the harness's SeaweedFS.
    "litdata-s3-w4": ("remote_arms", "litdata"),
    "streaming-s3-w4": ("remote_arms", "streaming"),
    "lance-s3-take": ("remote_arms", "lance"),
}


def main(argv):
    if len(argv) == 7 and argv[1] == "--digests":
        kind, npy_dir, draws, steps, out = argv[2:]
        write_digests(kind, npy_dir, draws, int(steps), out)
        return 0
    if len(argv) != 9:
        emit({"skipped": f"usage: {__doc__.splitlines()[3].strip()}"})
        return 2
    arm, kind, store, npy_dir, draws, peer_dir, batches, warmup = argv[1:]
    job = Job(arm, kind, store, npy_dir, draws, peer_dir, int(batches), int(warmup))
    if arm not in ARMS:
        emit({"skipped": f"unknown arm {arm}"})
        return 0
    module, package = ARMS[arm]
    try:
        __import__(package)
    except ImportError as e:
        emit({"skipped": f"{package} not installed ({e})"})
        return 0
    mod = __import__(f"loaders.{module}", fromlist=["run"])
    try:
        out = mod.run(job)
    except Exception as e:  # the row reports the failure; the harness marks it unverified
        traceback.print_exc()
        out = {"per_batch_s": None, "verified": False, "error": f"{type(e).__name__}: {e}"}
    emit(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
