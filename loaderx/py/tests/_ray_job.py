"""A Ray Data job writing a loaderx dataset, run as its own driver process by test_ray.py's fault
tests (it joins the test's local Ray cluster). Each mode stops at a point the test controls by files
in DIR, so the test acts on a condition, never on a sleep:

* ``hang``: the tasks' parts are written; ``on_write_complete`` writes DIR/ready.json (the parts the
  tasks returned) and then waits forever: the test kills this driver there.
* ``barrier``: ``on_write_complete`` writes DIR/ready-TAG and waits for DIR/go, then commits.
* ``stall``: each write task, after its first rows went into its part, writes DIR/mid and waits for
  DIR/go (the test stops the object store meanwhile).

Prints one JSON line: ``{"version": n, "parts": [...]}`` or ``{"error": class name, "message": ...}``.

usage: python _ray_job.py ADDRESS MODE ROOT DIR TAG ROWS BLOCKS [STORAGE_OPTIONS_JSON]
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import numpy as np
import ray

from loaderx.ray import ZrecordDatasink

address, mode, root, ctl, tag, rows, blocks = sys.argv[1:8]
storage_options = json.loads(sys.argv[8]) if len(sys.argv) > 8 else None
rows, blocks = int(rows), int(blocks)


def _wait_for(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.02)


def _touch(path: str, text: str = "") -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


class HangSink(ZrecordDatasink):
    def on_write_complete(self, write_result):
        parts = [p[0] for r in write_result.write_returns for p in r["parts"]]
        _touch(os.path.join(ctl, "ready.json"), json.dumps(parts))
        threading.Event().wait()


class BarrierSink(ZrecordDatasink):
    def on_write_complete(self, write_result):
        parts = [p[0] for r in write_result.write_returns for p in r["parts"]]
        _touch(os.path.join(ctl, f"ready-{tag}"), json.dumps(parts))
        _wait_for(os.path.join(ctl, "go"))
        super().on_write_complete(write_result)


class StallSink(ZrecordDatasink):
    def _append(self, part, table, task, row0):
        super()._append(part, table, task, row0)
        if part.rows == 0:
            _touch(os.path.join(ctl, "mid"))
            _wait_for(os.path.join(ctl, "go"))


def main() -> None:
    ray.init(address=address, log_to_driver=False)
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    offset = 1000 * int(tag) if tag.isdigit() else 0
    ds = ray.data.range(rows, override_num_blocks=blocks).map_batches(
        lambda b: {"id": b["id"] + offset, "v": np.stack([b["id"] + offset] * 4, axis=1).astype(np.int32)}
    )
    sink = {"hang": HangSink, "barrier": BarrierSink, "stall": StallSink}[mode](
        root, storage_options=storage_options
    )
    try:
        ds.write_datasink(sink)
    except Exception as e:  # noqa: BLE001 - reported to the test
        cause = getattr(e, "cause", None) or e
        print(json.dumps({"error": type(cause).__name__, "classes": [c.__name__ for c in type(e).__mro__],
                          "message": str(e)[-2000:]}), flush=True)
        return
    print(json.dumps({"version": sink.result["version"], "parts": sink.parts}), flush=True)


if __name__ == "__main__":
    main()
