"""The binding's layout (issue 12): the `use crate::...` graph of loaderx/py/src is acyclic, no
source file is over 700 lines, every module opens with `//!` docs, the stub matches the module and
the version comes from the package metadata."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules() -> dict[str, str]:
    mods = {}
    for p in sorted(SRC.rglob("*.rs")):
        rel = p.relative_to(SRC).with_suffix("").as_posix()
        name = rel.removesuffix("/mod").split("/")[0]
        text = re.sub(r"//.*", "", p.read_text())
        mods[rel] = text
        mods.setdefault(f"top:{name}", "")
        mods[f"top:{name}"] += text
    return mods


def _edges() -> set[tuple[str, str]]:
    edges = set()
    for key, text in _modules().items():
        if not key.startswith("top:"):
            continue
        a = key[4:]
        if a == "lib":
            continue
        for b in re.findall(r"\bcrate::([a-z_]+)", text):
            if b != a:
                edges.add((a, b))
    return edges


def test_module_graph_is_acyclic():
    graph: dict[str, set[str]] = {}
    for a, b in _edges():
        graph.setdefault(a, set()).add(b)
    done: set[str] = set()

    def visit(n: str, path: list[str]) -> None:
        if n in path:
            raise AssertionError("module cycle: " + " -> ".join(path[path.index(n) :] + [n]))
        if n in done:
            return
        for m in sorted(graph.get(n, ())):
            visit(m, path + [n])
        done.add(n)

    for n in sorted(graph):
        visit(n, [])


def test_files_are_small_and_documented():
    for p in sorted(SRC.rglob("*.rs")):
        lines = p.read_text().splitlines()
        assert len(lines) <= 700, f"{p.relative_to(SRC)} has {len(lines)} lines"
        assert lines and lines[0].startswith("//!"), f"{p.relative_to(SRC)} has no //! module docs"


def test_version_comes_from_package_metadata():
    from importlib.metadata import version

    import loaderx

    assert loaderx.__version__ == version("loaderx")


def test_stub_matches_the_module(tmp_path):
    """`python -m mypy.stubtest loaderx._loaderx` passes (skipped where mypy is not installed). A
    `bench-hooks` build has one name the stub leaves out: the allowlist covers it there only."""
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
