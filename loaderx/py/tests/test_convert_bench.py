"""The `convert` table's cells, small (the quick version of `harness/python/convert_bench.py` that
CI runs): 8 Oxford-Pet images and 200 WikiText lines converted by a real Ray Data job at 1 and 2
workers into loaderx, locally and on a real SeaweedFS server, and by one process without Ray. Every
row must be verified from compared records and carry its rows/s, bytes written and peak RSS. The
Lance rows are measured where pylance is installed (LOADERX_INSTALL_PEERS=1) and are otherwise
rows with a "not installed" note and no figures."""

import importlib.util
import os
from pathlib import Path

import pytest
from _remote_helpers import bench_rows

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[3]
CORPORA = Path(os.environ.get("LOADERX_CORPORA", REPO.parent / "shared" / "corpora"))


def test_convert_cells_verify_every_record_locally_and_on_seaweedfs(tmp_path):
    if os.environ.get("LOADERX_REQUIRE_RAY") != "1" and importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install 'loaderx[ray]')")
    for part in ("oxford-pet", "text/wikitext2", "gpt2"):
        if not (CORPORA / part).exists():
            pytest.skip(f"corpus {CORPORA / part} is absent (set LOADERX_CORPORA)")
    rows = bench_rows("convert_bench.py", [
        "--pets", "8", "--size", "32", "--lines", "200", "--repeats", "1", "--workers", "1,2",
        "--where", "local,seaweedfs", "--pets-dir", str(CORPORA / "oxford-pet"),
        "--text-dir", str(CORPORA / "text")], tmp_path)
    cells = {(x["row"], x["job"], x["where"], x["workers"]): x for x in rows}
    assert len(cells) == len(rows), "one row per cell"
    try:
        import lance  # noqa: F401

        lance = True
    except ImportError:
        lance = False
    for job in ("pets", "text"):
        for where in ("local", "seaweedfs"):
            want = [("single-process", 1), ("loaderx", 1), ("loaderx", 2)]
            want += [("lance", 1), ("lance", 2)] if lance else []
            for row, w in want:
                x = cells[(row, job, where, w)]
                assert x["verified"] is True and x["rows"] > 0, x
                assert x["rows_per_s"] > 0 and x["mib_written"] > 0 and x["mib_s"] > 0, x
                assert x["peak_rss_mib"] > 50, x  # a Python process with numpy and loaderx
                assert [rep["verified"] for rep in x["repeats"]] == [True], x
            if not lance:
                for w in (1, 2):
                    x = cells[("lance", job, where, w)]
                    assert x["verified"] is None and "not installed" in x["note"], x
    assert cells[("loaderx", "pets", "local", 1)]["rows"] == 8
    assert cells[("loaderx", "text", "local", 1)]["rows"] == cells[("single-process", "text", "seaweedfs", 1)]["rows"]
