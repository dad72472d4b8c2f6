"""The `scale` table's cells, small (what `harness/python/scale_bench.py` runs at 10^6-10^9 records):
2,000 tiny records of each layout as a dataset of parts and as one container, and the `--giant` size
(4,000 Dense records as 4 parts) locally and on a real SeaweedFS server, where 8 writer processes
write its parts and a loaderx cell reads them. Every row must be verified from compared values; the
giant size's rows must exist where the full run's 10^9 rows will be."""

import pytest
from _remote_helpers import bench_rows

pytestmark = pytest.mark.timeout(300)


def test_scale_cells_verify_and_the_giant_size_is_read_locally_and_on_seaweedfs(tmp_path):
    rows = bench_rows("scale_bench.py", ["--sizes", "2000", "--part-records", "1000", "--giant", "4000",
                                         "--remote", "--remote-max", "2000", "--writer-parts", "8",
                                         "--remote-writer-parts", "8", "--loaderx-repeats", "2",
                                         "--repeat-max", "2000"], tmp_path)
    measured = [x for x in rows if x["row"].startswith("loaderx")]
    for x in measured:
        assert x["verified"] is True, x

    def row(name, records, where, layout="dense"):
        (x,) = [x for x in measured if (x["row"], x["records"], x["where"], x["layout"])
                == (name, records, where, layout)]
        return x

    for where in ("local", "seaweedfs"):
        for layout in ("dense", "ragged"):
            assert row("loaderx-parts", 2000, where, layout)["parts"] == 2
            assert row("loaderx-single", 2000, where, layout)["parts"] == 1
    # Local cells up to --repeat-max ran twice, alternating; the row is one of its runs.
    for layout in ("dense", "ragged"):
        for name in ("loaderx-parts", "loaderx-single"):
            x = row(name, 2000, "local", layout)
            assert len(x["repeats"]) == 2 and all(r["verified"] for r in x["repeats"]), x
            assert x["gathers_per_s"] in [r["gathers_per_s"] for r in x["repeats"]], x
    giant = row("loaderx-parts", 4000, "local")
    assert len(giant["repeats"]) == 1, giant
    assert giant["parts"] == 4 and giant["batches"] >= 1001 and giant["gathers_per_s"] > 0, giant
    assert row("loaderx-single", 4000, "local")["parts"] == 1
    remote = row("loaderx-parts", 4000, "seaweedfs")
    assert remote["parts"] == 4 and remote["batches"] > 1, remote
    writers = row("loaderx-8-writers", 4000, "seaweedfs")
    assert writers["parts"] == 4 and writers["commit_ms"] > 0, writers


def test_the_steady_rate_is_the_median_of_ten_groups_rates_so_one_stall_does_not_move_it():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "harness" / "python" / "scale_bench.py"
    spec = importlib.util.spec_from_file_location("scale_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    times = [0.001] * 100
    assert bench.steady_rate(times) == pytest.approx(1000.0)
    times[57] = 1.0  # one batch stalled for a second: its group is the slowest, not the median
    assert bench.steady_rate(times) == pytest.approx(1000.0)
    # Half the groups twice as slow: the median lies between the two rates.
    assert bench.steady_rate([0.001] * 50 + [0.002] * 50) == pytest.approx(750.0)
    # Fewer batches than groups: their plain rate.
    assert bench.steady_rate([0.002] * 4) == pytest.approx(500.0)
