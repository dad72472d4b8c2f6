//! Round trips against a naive oracle (`Vec<Vec<u8>>` + shapes) over random dtypes, shapes, codecs,
//! shard counts, append splits and index sets.

mod support;

use proptest::prelude::*;
use support::*;
use zrecord::{Codec, DType, DenseStore, DenseWriter, RaggedStore, RaggedWriter};

fn codec_strategy() -> impl Strategy<Value = Codec> {
    prop_oneof![Just(Codec::Raw), Just(Codec::Zstd), Just(Codec::ZstdDict)]
}

fn dtype_strategy() -> impl Strategy<Value = DType> {
    (0..DType::ALL.len()).prop_map(|k| DType::ALL[k])
}

/// Index sets: random with duplicates, reversed full range, single, empty.
fn index_sets(n: u64, seed: u64) -> Vec<Vec<u64>> {
    let mut sets = vec![vec![], (0..n).rev().collect()];
    if n > 0 {
        sets.push(vec![n - 1]);
        let mut x = seed | 1;
        let mut v = Vec::new();
        for _ in 0..(2 * n).min(300) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.push(x % n);
        }
        sets.push(v);
        sets.push(vec![0, 0, 0]);
    }
    sets
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn dense_matches_oracle(
        dtype in dtype_strategy(),
        item in prop::collection::vec(1u64..5, 0..3),
        codec in codec_strategy(),
        shards in 1u32..6,
        n in 0usize..200,
        splits in prop::collection::vec(0usize..200, 0..4),
        low in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d");
        let stride = item.iter().product::<u64>() as usize * dtype.itemsize();
        let data = bytes(stride * n, seed, low);
        let dict = (codec == Codec::ZstdDict).then(small_dict);
        let mut w = DenseWriter::create(&path, dtype, &item, codec, opts(shards, dict)).unwrap();
        // Append in pieces at the given split points.
        let mut cuts: Vec<usize> = splits.into_iter().map(|s| s.min(n)).collect();
        cuts.push(0);
        cuts.push(n);
        cuts.sort_unstable();
        for w2 in cuts.windows(2) {
            w.append(&data[w2[0] * stride..w2[1] * stride]).unwrap();
        }
        prop_assert_eq!(w.len(), n as u64);
        w.close().unwrap();
        let store = DenseStore::open(&path).unwrap();
        prop_assert_eq!(store.len(), n as u64);
        prop_assert_eq!(store.item_shape(), &item[..]);
        store.verify().unwrap();
        let view = store.bind(alloc());
        for idx in index_sets(n as u64, seed) {
            let b = view.gather(&idx).unwrap();
            let mut expect = Vec::new();
            for &i in &idx {
                expect.extend_from_slice(&data[i as usize * stride..(i as usize + 1) * stride]);
            }
            prop_assert_eq!(b.bytes(), &expect[..]);
            prop_assert_eq!(b.shape()[0], idx.len() as u64);
            prop_assert_eq!(&b.shape()[1..], &item[..]);
        }
        if n > 0 {
            let r = view.get(n as u64 - 1).unwrap();
            prop_assert_eq!(r.shape(), &item[..]);
            prop_assert_eq!(r.bytes(), &data[(n - 1) * stride..]);
        }
    }

    #[test]
    fn ragged_matches_oracle(
        dtype in dtype_strategy(),
        ndim in 1u32..4,
        codec in codec_strategy(),
        shards in 1u32..6,
        shapes in prop::collection::vec(prop::collection::vec(1u64..7, 3), 0..150),
        split in 0usize..150,
        low in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        let isz = dtype.itemsize();
        let recs: Vec<(Vec<u8>, Vec<u64>)> = shapes
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let s = s[..ndim as usize].to_vec();
                let len = s.iter().product::<u64>() as usize * isz;
                (bytes(len, seed ^ k as u64, low), s)
            })
            .collect();
        let dict = (codec == Codec::ZstdDict).then(small_dict);
        let mut w = RaggedWriter::create(&path, dtype, ndim, codec, opts(shards, dict)).unwrap();
        let split = split.min(recs.len());
        for part in [&recs[..split], &recs[split..]] {
            let (v, cu, sh) = pack(part, isz);
            w.append(&v, &cu, &sh).unwrap();
        }
        w.close().unwrap();
        let store = RaggedStore::open(&path).unwrap();
        prop_assert_eq!(store.len(), recs.len() as u64);
        store.verify().unwrap();
        let view = store.bind(alloc());
        for idx in index_sets(recs.len() as u64, seed) {
            let b = view.gather(&idx).unwrap();
            prop_assert_eq!(b.len(), idx.len());
            prop_assert_eq!(b.cu_seqlens()[0], 0);
            let mut values = Vec::new();
            let mut shp = Vec::new();
            for &i in &idx {
                values.extend_from_slice(&recs[i as usize].0);
                shp.extend_from_slice(&recs[i as usize].1);
            }
            prop_assert_eq!(b.values(), &values[..]);
            prop_assert_eq!(b.shapes(), &shp[..]);
            for (k, &i) in idx.iter().enumerate() {
                prop_assert_eq!(b.record(k), &recs[i as usize].0[..]);
            }
            prop_assert_eq!(b.cu_seqlens().len(), idx.len() + 1);
        }
    }
}

#[test]
fn empty_ragged_gather_has_single_zero_offset() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r");
    ragged_fixture(&p, Codec::Raw, 2, 5);
    let v = RaggedStore::open(&p).unwrap().bind(alloc());
    let b = v.gather(&[]).unwrap();
    assert_eq!(b.cu_seqlens(), &[0]);
    assert!(b.values().is_empty() && b.shapes().is_empty());
}

#[test]
fn large_parallel_gather_matches_sequential() {
    // 64 KiB records, 64 of them: crosses the parallel threshold. The same gather with the rayon
    // fan-out switched off (`sequential_gathers`, what loader workers use) gives the same bytes.
    let dir = tempfile::tempdir().unwrap();
    let idx: Vec<u64> = (0..200u64).map(|k| (k * 37) % 64).collect();
    for (name, codec, shards) in [("d", Codec::Raw, 4), ("z", Codec::Zstd, 3)] {
        let p = dir.path().join(name);
        let recs = dense_fixture(&p, codec, shards, 64, &[32768]);
        let v = DenseStore::open(&p).unwrap().bind(alloc());
        let before = zrecord::gather_fan_outs();
        let parallel = v.gather(&idx).unwrap();
        let fanned = zrecord::gather_fan_outs();
        assert_eq!(
            fanned.wrapping_sub(before),
            u64::from(rayon::current_num_threads() > 1),
            "a 12.5 MiB gather fans out wherever the pool has threads to fan out to"
        );
        let sequential = zrecord::sequential_gathers(|| v.gather(&idx).unwrap());
        v.gather(&idx[..1]).unwrap();
        assert_eq!(
            zrecord::gather_fan_outs(),
            fanned,
            "sequential and one-record gathers do not count"
        );
        for b in [&parallel, &sequential] {
            for (k, &i) in idx.iter().enumerate() {
                assert_eq!(
                    &b.bytes()[k * 65536..(k + 1) * 65536],
                    &recs[i as usize][..],
                    "{codec:?} record {i} at {k}"
                );
            }
        }
    }
}

#[test]
fn incompressible_records_are_stored_raw_and_compressible_ones_shrink() {
    let dir = tempfile::tempdir().unwrap();
    // 20 zstd records of 4 KiB at `name`: noise, or (`calm`) low-entropy bytes.
    let write = |name: &str, calm: bool| {
        let path = dir.path().join(name);
        let data = bytes(4096 * 20, 5, calm);
        let mut w =
            DenseWriter::create(&path, DType::UInt8, &[4096], Codec::Zstd, opts(2, None)).unwrap();
        w.append(&data).unwrap();
        w.close().unwrap();
        (path, data)
    };
    let (noisy, data) = write("noisy", false);
    let (calm, data2) = write("calm", true);
    let a = DenseStore::open(&noisy).unwrap();
    let b = DenseStore::open(&calm).unwrap();
    let size = |p: &std::path::Path| -> u64 {
        zrecord::container_files(p)
            .unwrap()
            .iter()
            .map(|f| std::fs::metadata(f).unwrap().len())
            .sum()
    };
    // Noisy data cannot grow beyond raw + headers; calm data must shrink a lot.
    assert!(
        size(&noisy) < data.len() as u64 + 4096,
        "incompressible records must fall back to raw"
    );
    assert!(
        size(&calm) < data2.len() as u64 * 3 / 4,
        "calm {} raw {}",
        size(&calm),
        data2.len()
    );
    assert_eq!(a.bind(alloc()).range(0..20).unwrap().bytes(), &data[..]);
    assert_eq!(b.bind(alloc()).range(0..20).unwrap().bytes(), &data2[..]);
}

#[test]
fn train_dict_from_a_store_feeds_a_dict_store() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let recs = ragged_fixture(&src, Codec::Raw, 2, 400);
    let view = RaggedStore::open(&src).unwrap().bind(alloc());
    let d = zrecord::train_dict(&view, 4096).unwrap();
    assert!(!d.is_empty() && d.len() <= 4096);
    let dst = dir.path().join("dst");
    let mut w = RaggedWriter::create(
        &dst,
        DType::Int32,
        2,
        Codec::ZstdDict,
        opts(4, Some(d.clone())),
    )
    .unwrap();
    let all = view.range(0..400).unwrap();
    w.append(all.values(), all.cu_seqlens(), all.shapes())
        .unwrap();
    w.close().unwrap();
    let s = RaggedStore::open(&dst).unwrap();
    assert_eq!(s.dictionary(), Some(&d[..]));
    let b = s.bind(alloc()).gather(&[399, 0]).unwrap();
    assert_eq!(b.record(0), &recs[399].0[..]);
    assert_eq!(b.record(1), &recs[0].0[..]);
}
