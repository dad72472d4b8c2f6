"""The package's surface: the stub matches the native module and the version comes from the
package metadata. (The Rust source layout rules, acyclic modules, file sizes and `//!` docs, are
checked for every crate by `harness/tests/module_graph.rs`.)"""

from __future__ import annotations

import ast
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


def test_stub_bases_name_only_what_each_class_has():
    """The stub writes what Dense and Ragged classes share once, in `@type_check_only` bases that
    do not exist at runtime. stubtest checks every runtime name against the whole stub MRO, but not
    the other way: here every name a base declares must exist on each runtime class deriving from
    it."""
    import loaderx._loaderx as native

    stub = SRC.parent / "python" / "loaderx" / "_loaderx.pyi"
    classes = {c.name: c for c in ast.parse(stub.read_text()).body if isinstance(c, ast.ClassDef)}

    def declared(c):
        return {n.name for n in c.body if isinstance(n, ast.FunctionDef)}

    def bases(c):
        for b in c.bases:
            name = b.value.id if isinstance(b, ast.Subscript) else getattr(b, "id", None)
            if name in classes and name.startswith("_"):
                yield classes[name]
                yield from bases(classes[name])

    checked = 0
    for name, c in classes.items():
        if name.startswith("_"):
            continue
        runtime = getattr(native, name)
        for base in bases(c):
            for attr in declared(base):
                assert hasattr(runtime, attr), f"{name} lacks {attr}, which the stub's {base.name} declares"
                checked += 1
    assert checked >= 60, checked
