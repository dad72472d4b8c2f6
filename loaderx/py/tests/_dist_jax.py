"""Process `i` of 2 JAX CPU processes (`jax.distributed.initialize` on loopback): feeds its slice of
every global batch to `jax.make_array_from_process_local_data` and checks the global array against
the single-process batch (its addressable shard, and the whole array via `process_allgather`).
Usage: _dist_jax.py ROOT PORT PROCESS_ID. Prints `PROCESS i OK`."""

import sys

import numpy as np

from _dist_common import BATCH, Streams


def main(root, port, pid):
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=pid)
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from loaderx.distributed import jax_process

    index, count = jax_process()
    assert (index, count) == (pid, 2), (index, count)
    mesh = Mesh(np.array(jax.devices()), ("batch",))
    sharding = NamedSharding(mesh, PartitionSpec("batch"))
    st = Streams(root)
    for mode in ("IID", "CYCLIC"):
        ref = st.loader(mode, step=4)
        with st.loader(mode, step=4, index=index, count=count) as mine:
            for _ in range(3):
                local = np.concatenate([np.from_dlpack(s["x"]) for s in mine.next()])
                want = np.concatenate([np.from_dlpack(s["x"]) for s in ref.next()])
                g = jax.make_array_from_process_local_data(sharding, local, (BATCH, 3))
                assert g.shape == (BATCH, 3)
                for shard in g.addressable_shards:
                    np.testing.assert_array_equal(np.asarray(shard.data), want[shard.index])
                whole = multihost_utils.process_allgather(g, tiled=True)
                np.testing.assert_array_equal(np.asarray(whole), want)
        ref.close()
    jax.distributed.shutdown()
    print(f"PROCESS {pid} OK", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
