"""ArrayRecord helper process for the `arrayrecord-raw` / `arrayrecord-zstd` competitor rows.

Driven by competitors/src/arrayrecord.rs over stdin/stdout with a length-prefixed little-endian
binary protocol. The helper times its own work with time.perf_counter_ns so interpreter start-up,
the pipe transfer and the Rust side never enter the measurement:

  request  = op:u8, body
  response = status:u8 (0 ok, 1 error), then the body, or an error message (str)
  str      = len:u32, utf-8 bytes;  blob = len:u64, bytes

  b"P" PING                                                 -> str (versions)
  b"W" WRITE  path, options, kind:u8 (0 dense, 1 ragged), ndim:u64,
              values_path, offsets_path (u64 byte offsets, n + 1), shapes_path (u64, n * ndim)
                                                            -> elapsed_ns:u64
       timed: every writer.write(record) and writer.close(); writer construction excluded.
       Ragged records are the record's ndim u64 dims followed by its bytes.
  b"O" OPEN   path, options, kind:u8, itemsize:u64, ndim:u64 -> num_records:u64
  b"G" GATHER n:u64, n * u64 indices
       dense  -> elapsed_ns:u64, blob (n * stride bytes)
       ragged -> elapsed_ns:u64, blob values, blob cu_seqlens (int32), blob shapes (uint64)
       timed: reader.read(list_of_indices) and packing into the common layout with numpy.
  b"Q" QUIT
"""

import struct
import sys
import time

import numpy as np
from array_record.python import array_record_module as arm

inp = sys.stdin.buffer
out = sys.stdout.buffer


def read_exact(n):
    buf = inp.read(n)
    if buf is None or len(buf) != n:
        raise EOFError("pipe closed")
    return buf


def read_u8():
    return read_exact(1)[0]


def read_u64():
    return struct.unpack("<Q", read_exact(8))[0]


def read_str():
    (n,) = struct.unpack("<I", read_exact(4))
    return read_exact(n).decode()


def send_ok(*parts):
    out.write(b"\x00")
    for p in parts:
        out.write(p)
    out.flush()


def blob(b):
    mv = memoryview(b).cast("B")
    return struct.pack("<Q", mv.nbytes) + mv.tobytes()


def u64(x):
    return struct.pack("<Q", x)


def do_write():
    path, options = read_str(), read_str()
    kind, ndim = read_u8(), read_u64()
    values_path, offsets_path, shapes_path = read_str(), read_str(), read_str()
    values = np.fromfile(values_path, dtype=np.uint8)
    mv = memoryview(values)
    offs = np.fromfile(offsets_path, dtype="<u8").tolist()
    n = len(offs) - 1
    writer = arm.ArrayRecordWriter(path, options)
    if kind == 0:
        t0 = time.perf_counter_ns()
        for i in range(n):
            writer.write(mv[offs[i] : offs[i + 1]].tobytes())
        writer.close()
        t1 = time.perf_counter_ns()
    else:
        shapes = np.fromfile(shapes_path, dtype="<u8").reshape(n, ndim)
        t0 = time.perf_counter_ns()
        for i in range(n):
            writer.write(b"".join((shapes[i].tobytes(), mv[offs[i] : offs[i + 1]])))
        writer.close()
        t1 = time.perf_counter_ns()
    send_ok(u64(t1 - t0))


class State:
    reader = None
    kind = 0
    itemsize = 1
    ndim = 0


def do_open():
    path, options = read_str(), read_str()
    kind, itemsize, ndim = read_u8(), read_u64(), read_u64()
    if State.reader is not None:
        State.reader.close()
    State.reader = arm.ArrayRecordReader(path, options)
    State.kind, State.itemsize, State.ndim = kind, itemsize, ndim
    send_ok(u64(State.reader.num_records()))


def do_gather():
    n = read_u64()
    idx = np.frombuffer(read_exact(8 * n), dtype="<u8")
    rd, h = State.reader, 8 * State.ndim
    if State.kind == 0:
        t0 = time.perf_counter_ns()
        recs = rd.read(idx.tolist()) if n else []
        batch = np.frombuffer(b"".join(recs), dtype=np.uint8)
        t1 = time.perf_counter_ns()
        send_ok(u64(t1 - t0), blob(batch))
    else:
        t0 = time.perf_counter_ns()
        recs = rd.read(idx.tolist()) if n else []
        shapes = np.frombuffer(b"".join([r[:h] for r in recs]), dtype="<u8")
        values = np.frombuffer(b"".join([memoryview(r)[h:] for r in recs]), dtype=np.uint8)
        lens = np.fromiter((len(r) - h for r in recs), dtype=np.int64, count=n) // State.itemsize
        cu = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(lens, dtype=np.int32, out=cu[1:])
        t1 = time.perf_counter_ns()
        send_ok(u64(t1 - t0), blob(values), blob(cu), blob(shapes))


def main():
    ops = {ord("W"): do_write, ord("O"): do_open, ord("G"): do_gather}
    while True:
        try:
            op = read_u8()
        except EOFError:
            return
        if op == ord("Q"):
            return
        try:
            if op == ord("P"):
                import importlib.metadata as md

                v = f"array_record {md.version('array-record')}, numpy {np.__version__}".encode()
                send_ok(struct.pack("<I", len(v)), v)
            else:
                ops[op]()
        except Exception as e:  # reported to the Rust side, which turns it into an Error
            msg = f"{type(e).__name__}: {e}".encode()
            out.write(b"\x01" + struct.pack("<I", len(msg)) + msg)
            out.flush()


if __name__ == "__main__":
    main()
