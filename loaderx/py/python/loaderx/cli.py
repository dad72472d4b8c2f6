"""``loaderx``: the operators' command (also ``python -m loaderx``) for datasets of parts and single
containers, local or on object storage.

* ``info ROOT``: versions, parts, columns, schema, record counts and sizes;
* ``verify ROOT``: every checksum of every part of a version, with a progress line; exits 1 naming
  the first bad part, file, record or page;
* ``gc ROOT``: lists the parts no version lists (``--delete`` removes them);
* ``commit ROOT PART...`` / ``append ROOT PART...``: publish a version of parts written elsewhere.

Object storage takes the ``storage_options`` keys of the Python API as ``--option key=value`` (or the
``LOADERX_STORAGE_OPTIONS`` environment variable, ``key=value`` pairs separated by commas; the
credentials' own environment variables, ``AWS_ACCESS_KEY_ID`` and so on, work as usual). ``--json``
prints one JSON document for scripts instead of text.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from . import dataset, errors
from .zrecord import DenseStore, RaggedStore

__all__ = ["main"]


def _options(pairs: list[str]) -> dict[str, str] | None:
    items = [p for p in os.environ.get("LOADERX_STORAGE_OPTIONS", "").split(",") if p] + pairs
    out = {}
    for p in items:
        key, sep, value = p.partition("=")
        if not sep or not key:
            raise SystemExit(f"loaderx: --option takes key=value, got {p!r}")
        out[key.strip()] = value.strip()
    return out or None


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _stores(root: str, version: int | None, so: dict | None) -> tuple[dict | None, list[tuple[str, Any]]]:
    """The version's manifest and one opened store per column (a single container: one store)."""
    m = dataset.info(root, version, storage_options=so)
    cols = m["columns"] if m else [None]
    stores = []
    for c in cols:
        kind = c["kind"] if c else None
        name = (c["name"] or None) if c else None
        kw: dict[str, Any] = {"storage_options": so, "version": m["version"] if m else None, "column": name}
        if kind is None:
            # A single container: whichever kind it is.
            try:
                stores.append(("", DenseStore(root, storage_options=so)))
            except errors.FormatError:
                stores.append(("", RaggedStore(root, storage_options=so)))
            continue
        cls = DenseStore if kind == "dense" else RaggedStore
        stores.append((name or "", cls(root, **kw)))
    return m, stores


def _info(a, so) -> tuple[dict, str]:
    m, stores = _stores(a.root, a.version, so)
    if m is None:
        s = stores[0][1]
        doc = {"root": a.root, "dataset": False, "records": len(s), "dtype": str(s.dtype),
               "codec": s.codec, "data_shards": s.data_shards}
        return doc, (f"{a.root}: a single container, {len(s):,} records, dtype {s.dtype}, "
                     f"codec {s.codec}, {s.data_shards} data shards")
    all_versions = dataset.versions(a.root, storage_options=so)
    doc = {"root": a.root, "dataset": True, "versions": all_versions, **m}
    lines = [f"{a.root}: dataset version {m['version']} (versions {all_versions[0]}..{all_versions[-1]}), "
             f"{m['records']:,} records in {len(m['parts']):,} parts, "
             f"{_size(sum(p['bytes'] for p in m['parts']))}"]
    for c in m["columns"]:
        shape = f"item shape {tuple(c['item_shape'])}" if c["kind"] == "dense" else f"ndim {c['ndim']}"
        lines.append(f"  column {c['name'] or '(single)'}: {c['kind']} {c['dtype']} {shape}, codec {c['codec']}")
    show = m["parts"] if a.parts else m["parts"][:5]
    for p in show:
        lines.append(f"  part {p['name']}: {p['records']:,} records, {_size(p['bytes'])}")
    if len(show) < len(m["parts"]):
        lines.append(f"  ... {len(m['parts']) - len(show):,} more parts (--parts lists all)")
    return doc, "\n".join(lines)


def _verify(a, so) -> tuple[dict, str]:
    m, stores = _stores(a.root, a.version, so)
    total = sum(s.parts for _, s in stores)
    done = 0
    show = not a.json and sys.stderr.isatty()
    for col, s in stores:
        names = [p["name"] for p in m["parts"]] if m else [a.root]
        for p in range(s.parts):
            try:
                s.verify_part(p)
            except errors.Error as e:
                if show:
                    print(file=sys.stderr)
                where = f"part {names[p]}" + (f" column {col}" if col else "")
                raise _Failed({"ok": False, "part": names[p], "column": col or None, "error": str(e)},
                              f"FAILED at {where}: {e}") from e
            done += 1
            if show:
                print(f"\rverify: {done}/{total} parts", end="", file=sys.stderr, flush=True)
    if show:
        print(file=sys.stderr)
    records = m["records"] if m else len(stores[0][1])
    return ({"ok": True, "parts": total, "records": records, "version": m["version"] if m else None},
            f"{a.root}: OK, {records:,} records in {total:,} part(s) checked"
            + (f" (version {m['version']})" if m else ""))


def _gc(a, so) -> tuple[dict, str]:
    r = dataset.gc(a.root, min_age_secs=a.min_age, dry_run=not a.delete, storage_options=so)
    verb = "would remove" if r["dry_run"] else "removed"
    lines = [f"{a.root}: {verb} {len(r['removed'])} unlisted part(s), {r['files']} file(s); "
             f"{len(r['young'])} younger than {a.min_age} s left alone"]
    lines += [f"  {verb}: {n}" for n in r["removed"]]
    if r["dry_run"] and r["removed"]:
        lines.append("  (dry run: --delete removes them)")
    return r, "\n".join(lines)


def _commit(a, so) -> tuple[dict, str]:
    if a.command == "append":
        m = dataset.append(a.root, a.parts, retries=a.retries, storage_options=so)
    else:
        m = dataset.commit(a.root, a.parts, storage_options=so)
    return m, f"{a.root}: committed version {m['version']}: {len(m['parts']):,} parts, {m['records']:,} records"


class _Failed(Exception):
    def __init__(self, doc: dict, text: str):
        super().__init__(text)
        self.doc, self.text = doc, text


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="loaderx", description="Inspect, verify, commit and clean up loaderx datasets.")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp):
        sp.add_argument("root", help="dataset root or container: a path or a URL (s3://bucket/prefix, ...)")
        sp.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a storage option (object_store keys: endpoint, region, allow_http, ...)")
        sp.add_argument("--json", action="store_true", help="print one JSON document")

    sp = sub.add_parser("info", help="versions, parts, columns, schema, records, sizes")
    common(sp)
    sp.add_argument("--version", type=int, default=None, help="a version (default: the newest)")
    sp.add_argument("--parts", action="store_true", help="list every part")
    sp = sub.add_parser("verify", help="check every checksum of every part")
    common(sp)
    sp.add_argument("--version", type=int, default=None, help="a version (default: the newest)")
    sp = sub.add_parser("gc", help="list (or --delete) the parts no version lists")
    common(sp)
    sp.add_argument("--delete", action="store_true", help="remove them (default: a dry run)")
    sp.add_argument("--min-age", type=int, default=3600, help="seconds a part must be old (default 3600)")
    for name, help_ in (("commit", "publish a version listing exactly PART..."),
                        ("append", "publish a version adding PART... to the newest")):
        sp = sub.add_parser(name, help=help_)
        common(sp)
        sp.add_argument("parts", nargs="+", metavar="PART", help="part names under ROOT/parts/")
        sp.add_argument("--retries", type=int, default=0, help="append: retries after a conflict")
    return p


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    so = _options(a.option)
    run = {"info": _info, "verify": _verify, "gc": _gc, "commit": _commit, "append": _commit}[a.command]
    try:
        doc, text = run(a, so)
    except _Failed as f:
        print(json.dumps(f.doc) if a.json else f.text, file=sys.stdout if a.json else sys.stderr)
        return 1
    except errors.Error as e:
        msg = {"ok": False, "error": str(e), "type": type(e).__name__}
        print(json.dumps(msg) if a.json else f"loaderx {a.command}: {type(e).__name__}: {e}",
              file=sys.stdout if a.json else sys.stderr)
        return 1
    print(json.dumps(doc, default=str) if a.json else text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
