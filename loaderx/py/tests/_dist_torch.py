"""Run under `torchrun --standalone --nproc_per_node=2`: every rank loads its slice with gloo and
checks that the slices, all-gathered, equal a single-process loader's global batch (bitwise), then
that a mismatched seed makes `check_consistent` fail on every rank. Prints `RANK r OK`."""

import sys

import torch.distributed as dist

from _dist_common import VIEWS, Streams, flat, join
from loaderx.distributed import check_consistent, torch_process
from loaderx.errors import InvalidInputError

STEPS, RESUME = 5, 3


def refused(loader, named, what):
    """`check_consistent(loader)` fails, naming `named`; `what` says what it would have accepted."""
    try:
        check_consistent(loader)
    except InvalidInputError as e:
        assert named in str(e), e
    else:
        raise AssertionError(f"check_consistent accepted {what}")


def main(root):
    dist.init_process_group("gloo")
    rank, world = torch_process()
    assert world == 2 and dist.get_rank() == rank, (rank, world)
    st = Streams(root)
    for mode in ("SEQUENTIAL", "IID", "CYCLIC"):
        for workers in (0, 1):
            # A fresh run from 0, then a resumed one from RESUME (a new sampler sought there).
            for start in (0, RESUME):
                ref = st.loader(mode, step=start, workers=workers)
                with st.loader(mode, step=start, workers=workers, index=rank, count=world) as mine:
                    check_consistent(mine)
                    for k in range(STEPS):
                        shards = mine.next()
                        assert len(shards) == VIEWS
                        parts = [None] * world
                        dist.all_gather_object(parts, flat(shards))
                        want = flat(ref.next())
                        assert join(parts) == want, (mode, workers, start, k)
                    assert mine.step == start + STEPS
                ref.close()
    # One rank with another seed: every rank must see the failure, naming the seed.
    with st.loader("CYCLIC", seed=3 + rank, index=rank, count=world) as bad:
        refused(bad, "'seed'", "different seeds")
    # And a loader claiming the wrong rank.
    with st.loader("CYCLIC", index=0, count=world) as dup:
        refused(dup, "process_index", "two process_index 0")
    dist.barrier()
    dist.destroy_process_group()
    print(f"RANK {rank} OK", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
