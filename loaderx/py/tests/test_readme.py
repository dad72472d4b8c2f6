"""Every CPU code example of the reference README's Usage sections, with only the imports it shows
(inputs such as data.npy, images, sequences are created first; `consume` is a no-op)."""

import numpy as np
import pytest


def consume(x):
    assert x is not None


def _prep_quick_start():
    np.save("data.npy", np.arange(1024 * 6, dtype=np.float32).reshape(1024, 2, 3))
    np.save("label.npy", np.arange(1024, dtype=np.int64))


def _prep_containers():
    images = np.random.default_rng(0).integers(0, 256, size=(100, 28, 28), dtype=np.uint8)
    sequences = [np.arange(1, n + 1, dtype=np.int32) for n in range(1, 30)]
    return images, sequences


def test_quick_start(chdir_tmp, capsys):
    _prep_quick_start()

    import numpy as np

    from loaderx import Allocator, Loader
    from loaderx.zrecord import DenseStore, DenseWriter
    from loaderx.sampler import Sampler

    data = np.load('data.npy', mmap_mode='r')
    label = np.load('label.npy', mmap_mode='r')
    with DenseWriter('train_data', data.dtype, data.shape[1:], codec='zstd') as ds:
        ds.append(data)
    with DenseWriter('train_label', label.dtype, label.shape[1:], codec='zstd') as ds:
        ds.append(label)

    with DenseStore('train_data') as data_store, \
            DenseStore('train_label') as label_store, \
            Allocator('cpu') as allocator:
        data_view = data_store.bind(allocator)
        label_view = label_store.bind(allocator)
        sampler = Sampler(len(data_view), 256, Sampler.Mode.CYCLIC, seed=42)
        loader = Loader({'data': [data_view], 'label': [label_view]}, sampler,
                        transform=lambda shards: shards)
        try:
            for i, shards in enumerate(loader):
                if i >= 256:
                    break
                shard = shards[0]

            print(shard['data'].shape)
            print(shard['label'].shape)
        finally:
            loader.close()

    out = capsys.readouterr().out.split("\n")
    assert out[0] == "(256, 2, 3)"
    assert out[1] == "(256,)"
    d = np.from_dlpack(shard['data'])
    lab = np.from_dlpack(shard['label'])
    # records stay aligned across streams
    np.testing.assert_array_equal(d[:, 0, 0], lab.astype(np.float32) * 6)


def test_records_dense(chdir_tmp):
    import numpy as np
    from loaderx import Allocator, dtypes
    from loaderx.zrecord import DenseStore, DenseWriter

    data = np.arange(64, dtype=dtypes.float32).reshape(8, 2, 4)
    with DenseWriter('data', data.dtype, data.shape[1:], codec='zstd') as ds:
        ds.append(data)
    seen = []
    with DenseStore('data') as store, Allocator('cpu') as allocator:
        view = store.bind(allocator)
        record = view[0]                  # DLTensor (2, 4), no leading batch axis
        batch = view[0, 5, 2]             # DLTensor (3, 2, 4), requested order retained
        for record in view:                # each record is a DLTensor (2, 4)
            consume(record)
            seen.append(np.from_dlpack(record).copy())
        assert view[0].shape == (2, 4)
        assert batch.shape == (3, 2, 4)
        np.testing.assert_array_equal(np.from_dlpack(batch), data[[0, 5, 2]])
    np.testing.assert_array_equal(np.stack(seen), data)


def test_records_ragged(chdir_tmp):
    from loaderx import Allocator, dtypes
    from loaderx.zrecord import RaggedBatch, RaggedStore, RaggedWriter

    seqs = [np.arange(L, dtype=dtypes.int32) for L in (3, 1, 4, 1, 5)]
    with RaggedWriter('tokens', dtypes.int32, ndim=1, codec='zstd') as rs:
        rs.append(RaggedBatch.from_records(seqs))
    with RaggedStore('tokens') as store, Allocator('cpu') as allocator:
        view = store.bind(allocator)
        batch = view[0, 2, 4]             # RaggedBatch: values + cu_seqlens + shapes
        values = batch.values             # packed data, ready for a ragged-aware consumer
        tensors = batch.to_tensors()      # explicit per-record DLTensor views
        for tensor in tensors:            # each is one shape-restored DLTensor
            consume(tensor)
        np.testing.assert_array_equal(np.from_dlpack(values), np.concatenate([seqs[0], seqs[2], seqs[4]]))
        np.testing.assert_array_equal(np.from_dlpack(batch.cu_seqlens), [0, 3, 7, 12])
        np.testing.assert_array_equal(np.from_dlpack(batch.shapes), [[3], [4], [5]])
        for t, want in zip(tensors, [seqs[0], seqs[2], seqs[4]]):
            np.testing.assert_array_equal(np.from_dlpack(t), want)
        one = view[1]
        assert len(one) == 1 and np.from_dlpack(one.shapes).shape == (1, 1)
        empty = view[[]]
        np.testing.assert_array_equal(np.from_dlpack(empty.cu_seqlens), [0])


def test_creating_containers(chdir_tmp):
    images, sequences = _prep_containers()

    import numpy as np
    from loaderx import dtypes
    from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter
    from loaderx import Allocator  # the README snippet uses Allocator from the previous one

    with DenseWriter('mnist/x', dtype=dtypes.uint8, item_shape=(28, 28),
                     codec='zstd', data_shards=4) as ds:
        ds.append(images)

    with RaggedWriter('tokens', dtype=dtypes.int32, ndim=1, codec='zstd') as tok:
        tok.append(RaggedBatch.from_records(sequences))

    with DenseStore('mnist/x') as store, Allocator('cpu') as allocator:
        view = store.bind(allocator)
        first_four = view[:4]              # the Store is read-only; the view materializes
        np.testing.assert_array_equal(np.from_dlpack(first_four), images[:4])
        assert store.data_shards == 4
    with RaggedStore('tokens') as s, Allocator('cpu') as a:
        v = s.bind(a)
        assert len(v) == len(sequences)
        for t, want in zip(v[:].to_tensors(), sequences):
            np.testing.assert_array_equal(np.from_dlpack(t), want)


def test_codec_notes_dictionary(chdir_tmp):
    rng = np.random.default_rng(1)
    base = rng.integers(0, 50, size=64).astype(np.int32)
    sample = np.stack([np.roll(base, k) for k in range(400)])
    data = sample[:100].copy()
    token_generator = (np.roll(base, k)[: 5 + k % 40] for k in range(200))
    from loaderx.zrecord import DenseWriter as _W
    with _W('dict-sample', sample.dtype, sample.shape[1:], codec='raw') as w:
        w.append(sample)

    from loaderx import Allocator, dtypes
    from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter, train_dict

    # train once on a representative settled Zrecord sample
    with DenseStore('dict-sample') as sample_store, Allocator('cpu') as allocator:
        d = train_dict(sample_store.bind(allocator))

    # then any new store can install it and append explicitly
    with RaggedWriter('tokens', dtypes.int32, ndim=1,
                      codec='zstd_dict', dict_bytes=d) as ds:
        ds.append(RaggedBatch.from_records(token_generator))
    with DenseWriter('data', data.dtype, data.shape[1:],
                     codec='zstd_dict', dict_bytes=d) as ds:
        ds.append(data)

    assert isinstance(d, bytes) and len(d) > 0
    with DenseStore('data') as s, Allocator('cpu') as a:
        assert s.codec == 'zstd_dict' and s.dictionary == d
        np.testing.assert_array_equal(np.from_dlpack(s.bind(a)[:]), data)
    with RaggedStore('tokens') as s, Allocator('cpu') as a:
        v = s.bind(a)
        assert len(v) == 200
        np.testing.assert_array_equal(np.from_dlpack(v[7].values), np.roll(base, 7)[:12])


def test_codec_notes_recode(chdir_tmp):
    src = np.random.default_rng(2).integers(0, 9, size=(300, 16), dtype=np.int16)
    from loaderx.zrecord import DenseWriter as _W
    with _W('src', src.dtype, src.shape[1:], codec='zstd') as w:
        w.append(src)

    from loaderx import Allocator
    from loaderx.zrecord import train_dict
    from loaderx.zrecord import DenseStore, DenseWriter

    with DenseStore("src") as source_store, Allocator("cpu") as allocator:
        source = source_store.bind(allocator)
        dictionary = train_dict(source)
        with DenseWriter(
            "dst", dtype=source.dtype, item_shape=source.item_shape,
            codec="zstd_dict", dict_bytes=dictionary,
        ) as destination:
            destination.append(source[:])             # DLTensor -> DLTensor

    with DenseStore("dst") as s, Allocator("cpu") as a:
        np.testing.assert_array_equal(np.from_dlpack(s.bind(a)[:]), src)


def test_hf_conversion(chdir_tmp):
    pytest.importorskip("datasets")
    from datasets import Dataset, Features, Sequence, Value
    from loaderx.converter import convert

    dataset = Dataset.from_dict(
        {"tokens": [[1, 2], [3], [4, 5, 6]]},
        features=Features({"tokens": Sequence(Value("int32"))}),
    )
    convert(dataset, "tokens", codec="zstd")

    from loaderx import Allocator
    from loaderx.zrecord import RaggedStore
    with RaggedStore("tokens/tokens") as s, Allocator() as a:
        b = s.bind(a)[:]
        np.testing.assert_array_equal(np.from_dlpack(b.values), [1, 2, 3, 4, 5, 6])
        np.testing.assert_array_equal(np.from_dlpack(b.cu_seqlens), [0, 2, 3, 6])


def _multi_stream_inputs(n=512):
    rng = np.random.default_rng(3)
    joint = rng.standard_normal((n, 3, 5)).astype(np.float32)
    label = np.arange(n, dtype=np.int64)
    seqs = [np.full(1 + i % 7, i, dtype=np.int32) for i in range(n)]
    return joint, label, seqs


def test_loaders_multi_stream(chdir_tmp):
    joint, label, seqs = _multi_stream_inputs()

    from loaderx import Allocator, Loader, dtypes
    from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter
    from loaderx.sampler import Sampler

    root = "xsub/train"
    with DenseWriter(root + "/joint", joint.dtype, joint.shape[1:], codec="zstd") as s:
        s.append(joint)
    with DenseWriter(root + "/label", label.dtype, label.shape[1:], codec="zstd") as s:
        s.append(label)
    with RaggedWriter(root + "/token", dtypes.int32, ndim=1, codec="zstd") as s:
        s.append(RaggedBatch.from_records(seqs))

    stores = {
        "joint": DenseStore(root + "/joint"),
        "label": DenseStore(root + "/label"),
        "token": RaggedStore(root + "/token"),
    }
    with Allocator("cpu") as allocator:
        streams = {
            name: [store.bind(allocator)] for name, store in stores.items()
        }
        streams["joint"][0][0, 5, 2]     # each view has its own index API
        sampler = Sampler(len(streams["joint"][0]), 256, Sampler.Mode.CYCLIC, seed=42)
        loader = Loader(streams, sampler)
        try:
            shards = next(loader)             # [{name: values}], index-aligned
            shard = shards[0]
        finally:
            loader.close()
    for store in stores.values():
        store.close()

    assert len(shards) == 1 and set(shard) == {"joint", "label", "token"}
    lab = np.from_dlpack(shard["label"])
    np.testing.assert_array_equal(np.from_dlpack(shard["joint"]), joint[lab])
    tok = shard["token"]
    for k, t in enumerate(tok.to_tensors()):
        np.testing.assert_array_equal(np.from_dlpack(t), seqs[lab[k]])


def test_two_views_per_stream_and_collate(chdir_tmp):
    joint, label, _ = _multi_stream_inputs()
    from loaderx import Allocator, Loader
    from loaderx.zrecord import DenseStore, DenseWriter
    from loaderx.sampler import Sampler
    with DenseWriter("data", joint.dtype, joint.shape[1:], codec="raw") as s:
        s.append(joint)
    with DenseWriter("label", label.dtype, (), codec="raw") as s:
        s.append(label)
    with DenseStore("data") as data_store, DenseStore("label") as label_store, \
            Allocator("cpu") as allocator_0, Allocator("cpu") as allocator_1:
        streams = {
            "data": [
                data_store.bind(allocator_0),
                data_store.bind(allocator_1),
            ],
            "label": [
                label_store.bind(allocator_0),
                label_store.bind(allocator_1),
            ],
        }
        sampler = Sampler(len(streams["data"][0]), 32, Sampler.Mode.SEQUENTIAL)
        loader = Loader(streams, sampler, workers=0)
        shards = next(loader)
        loader.close()
        assert len(shards) == 2
        np.testing.assert_array_equal(np.from_dlpack(shards[0]["label"]), np.arange(16))
        np.testing.assert_array_equal(np.from_dlpack(shards[1]["label"]), np.arange(16, 32))

        dense_tokens, labelset = streams["data"][0], streams["label"][0]

        def collate(batch):
            return [
                {'input_ids': shard['data'], 'label': shard['label']}
                for shard in batch
            ]

        sampler = Sampler(len(dense_tokens), 32, Sampler.Mode.CYCLIC, seed=42)
        loader = Loader({'data': [dense_tokens], 'label': [labelset]}, sampler,
                        transform=collate)
        shards = next(loader)
        loader.close()
        assert set(shards[0]) == {"input_ids", "label"}
        np.testing.assert_array_equal(np.from_dlpack(shards[0]["input_ids"]), joint[np.from_dlpack(shards[0]["label"])])


def test_numpy_transform_pattern(chdir_tmp):
    """The Numba example's transform shape, without numba (optional dependency)."""
    from loaderx import Allocator, Loader, dtypes
    from loaderx.zrecord import DenseStore, DenseWriter
    from loaderx.sampler import Sampler

    img = np.random.default_rng(4).integers(0, 256, size=(16, 3, 8, 8), dtype=np.uint8)
    with DenseWriter("image", dtypes.uint8, (3, 8, 8), codec="raw") as w:
        w.append(img)

    def normalize_u8(x):
        out = np.empty(x.shape, dtype=dtypes.float32)
        out[...] = x / 255.0
        return out

    def transform(batch):
        for shard in batch:
            shard["image"] = normalize_u8(np.from_dlpack(shard["image"]))
        return batch

    with DenseStore("image") as s, Allocator("cpu") as a:
        loader = Loader({"image": [s.bind(a)]}, Sampler(16, 4, Sampler.Mode.SEQUENTIAL), transform=transform, workers=1)
        out = next(loader)
        loader.close()
    np.testing.assert_allclose(out[0]["image"], img[:4] / 255.0, rtol=1e-6)


def test_cpu_to_gpu_transfer_with_torch_cpu(chdir_tmp):
    torch = pytest.importorskip("torch")
    joint, label, _ = _multi_stream_inputs()
    from loaderx import Allocator, Loader
    from loaderx.zrecord import DenseStore, DenseWriter
    from loaderx.sampler import Sampler
    root = "r"
    with DenseWriter(root + "/joint", joint.dtype, joint.shape[1:], codec="zstd") as s:
        s.append(joint)
    with DenseWriter(root + "/label", label.dtype, (), codec="zstd") as s:
        s.append(label)

    device = "cpu"   # the README uses "cuda:0"; no GPU code in this suite
    def to_device(shards):
        return [
            {k: torch.from_dlpack(v).to(device, non_blocking=True)
             for k, v in shard.items()}
            for shard in shards
        ]

    with DenseStore(root + "/joint") as joint_store, \
            DenseStore(root + "/label") as label_store, \
            Allocator("cpu") as allocator:
        streams = {
            "joint": [joint_store.bind(allocator)],
            "label": [label_store.bind(allocator)],
        }
        sampler = Sampler(len(streams["joint"][0]), 256, Sampler.Mode.CYCLIC, seed=42)
        loader = Loader(streams, sampler, transform=to_device)
        try:
            for i, shards in enumerate(loader):
                assert torch.equal(shards[0]["joint"], torch.from_numpy(joint)[shards[0]["label"]])
                if i == 3:
                    break
        finally:
            loader.close()


def test_sampler_example():
    from loaderx.sampler import Sampler

    sampler = Sampler(1_000_000, 256, Sampler.Mode.IID, seed=42)
    indices = sampler.next()       # borrowed until this sampler's next draw
    saved = indices.copy()         # retain across draws only when needed

    assert indices.dtype == np.uint64 and indices.shape == (256,)
    assert (saved < 1_000_000).all()
    nxt = sampler.next()
    assert nxt is indices                      # one reused buffer
    assert not np.array_equal(saved, nxt)
    sampler.seek(0)
    np.testing.assert_array_equal(sampler.next(), saved)
    public = {n for n in dir(sampler) if not n.startswith("_")}
    assert public == {"next", "seek", "Mode", "block_runs", "window_runs"}
