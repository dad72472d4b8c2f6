"""Run under `torchrun --standalone --nproc_per_node=W` by `test_resume.py`: elastic resume.

`save`: the W ranks load 9 global steps (ordered, 2 workers each), check that their slices,
all-gathered, equal a one-process loader's global batches, check that every rank's state equals
rank 0's but for the process slice, and rank 0 saves its state with `torch.save` as
`state-W.pt`. `load N ...`: for each N, the W ranks load `state-N.pt` (saved by N processes) and
check that their slices continue the same global batches for 15 more steps. Prints `RANK r OK`."""

import sys
from pathlib import Path

import torch
import torch.distributed as dist

from _dist_common import BATCH, MODES, N, Streams, flat, join
from loaderx import Loader
from loaderx.distributed import check_consistent, torch_process
from loaderx.sampler import Sampler

SAVED_AT, MORE = 9, 15


def loader(st, rank, world):
    return Loader(st.streams, Sampler(N, BATCH, MODES["CYCLIC"], seed=3), workers=2, prefetch=2,
                  process_index=rank, process_count=world, ordered=True)


def gathered(l, world):
    parts = [None] * world
    dist.all_gather_object(parts, flat(l.next()))
    return join(parts)


def main(root, out, phase, *saved_by):
    dist.init_process_group("gloo")
    rank, world = torch_process()
    st = Streams(root)
    ref = st.loader("CYCLIC", seed=3)
    oracle = [flat(ref.next()) for _ in range(SAVED_AT + MORE)]
    out = Path(out)
    if phase == "save":
        with loader(st, rank, world) as l:
            check_consistent(l)
            for k in range(SAVED_AT):
                assert gathered(l, world) == oracle[k], (world, k)
            state = l.state_dict()
        states = [None] * world
        dist.all_gather_object(states, state)
        for r, s in enumerate(states):
            assert (s["process_index"], s["process_count"]) == (r, world)
            assert dict(s, process_index=0) == states[0], "ordered states differ only in the slice"
        if rank == 0:
            torch.save(state, out / f"state-{world}.pt")
    else:
        for n in saved_by:
            state = torch.load(out / f"state-{n}.pt")
            assert state["process_count"] == int(n) and state["step"] == SAVED_AT
            with loader(st, rank, world) as l:
                l.load_state_dict(state)
                check_consistent(l)
                for k in range(SAVED_AT, SAVED_AT + MORE):
                    assert gathered(l, world) == oracle[k], (n, world, k)
    dist.barrier()
    dist.destroy_process_group()
    print(f"RANK {rank} OK", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
