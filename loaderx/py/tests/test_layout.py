"""The package's surface: the stub matches the native module and the version comes from the
package metadata. (The Rust source layout rules, acyclic modules, file sizes and `//!` docs, are
checked for every crate by `harness/tests/module_graph.rs`.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def test_version_comes_from_package_metadata():
    from importlib.metadata import version

    import loaderx

    assert loaderx.__version__ == version("loaderx")


def test_stub_matches_the_module(tmp_path):
    """`python -m mypy.stubtest loaderx._loaderx` passes (skipped where mypy is not installed, except under CI). A
    `bench-hooks` build has one name the stub leaves out: the allowlist covers it there only."""
    if os.environ.get("CI"):
        import mypy.stubtest  # noqa: F401  (CI installs mypy: a missing one is a failure there)
    else:
        pytest.importorskip("mypy.stubtest")
    import loaderx._loaderx

    cmd = [sys.executable, "-m", "mypy.stubtest", "loaderx._loaderx"]
    if hasattr(loaderx._loaderx, "_bench_gather"):
        allowlist = SRC.parent / "stubtest-allowlist.txt"
        cmd += ["--allowlist", str(allowlist), "--ignore-unused-allowlist"]
    r = subprocess.run(
        cmd,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stdout + r.stderr
