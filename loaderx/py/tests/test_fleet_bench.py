"""The `fleet` table's cells, small (the quick version of `harness/python/fleet_bench.py` that CI
runs): a Dense store of 20,000 int64[8] records on a real SeaweedFS server, IID and three block
shuffles, 1 and 2 spawned readers, batch 256 and 1,024. Every row must be verified from compared
values, count requests, and have its GET-limit row; a narrow block window must cost fewer requests
and wire bytes per batch than IID and mix less (smaller mean |id difference|)."""

import pytest
from _remote_helpers import bench_rows

pytestmark = pytest.mark.timeout(300)


def test_fleet_cells_verify_count_requests_and_block_shuffles_cut_them(tmp_path):
    rows = bench_rows("fleet_bench.py", ["--records", "20000", "--seconds", "0.5", "--max-batches", "20",
                                         "--procs", "1,2"], tmp_path)
    ours = [x for x in rows if x["row"] == "loaderx"]
    limits = [x for x in rows if x["row"] == "get-limit"]
    assert len(ours) == 10 and len(limits) == 10, [(x["row"], x.get("order"), x.get("error")) for x in rows]
    for x in ours:
        assert x["verified"] is True and x["batches"] > 0, x
        assert x["requests_per_batch"] > 0 and x["bytes_per_batch"] >= x["delivered_per_batch"] > 0, x
        assert x["p50_ms"] <= x["p99_ms"], x
    for x in limits:
        assert x["verified"] is None and x["batches"] > 0 and x["mib_s"] > 0, x

    def cell(order, procs, batch=256):
        (x,) = [x for x in ours if (x["order"], x["procs"], x["batch"]) == (order, procs, batch)]
        return x

    for procs in (1, 2):
        iid, narrow = cell("iid", procs), cell("block-narrow", procs)
        assert narrow["block"] == 256 and narrow["window"] == 4
        assert narrow["requests_per_batch"] < iid["requests_per_batch"], (narrow, iid)
        assert narrow["bytes_per_batch"] < iid["bytes_per_batch"], (narrow, iid)
        assert narrow["mixing"] < iid["mixing"], (narrow, iid)
    assert cell("block-default", 1, 1024)["block"] == 256
