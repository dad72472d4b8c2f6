//! A raw Dense store places its records without the index (computed offsets, checksums from a
//! table built at open). Every gather path must still return exactly the written records, for
//! block sizes and shard counts that are and are not powers of two, and a damaged record must
//! still be reported by its number, shard file and byte offset.

mod support;

use support::{alloc, bytes};
use zrecord::{Codec, DType, DenseStore, DenseWriter, OpenOptions, WriterOptions};

/// Writes `n` records of `stride` bytes over `shards` shards; returns the records.
fn write(path: &std::path::Path, stride: usize, n: usize, shards: u32) -> Vec<Vec<u8>> {
    let data = bytes(stride * n, stride as u64 + u64::from(shards), false);
    let opts = WriterOptions {
        data_shards: shards,
        ..WriterOptions::default()
    };
    let mut w =
        DenseWriter::create(path, DType::UInt8, &[stride as u64], Codec::Raw, opts).unwrap();
    w.append(&data).unwrap();
    w.close().unwrap();
    data.chunks(stride).map(<[u8]>::to_vec).collect()
}

/// Pseudo-random indices below `n`.
fn indices(count: usize, n: usize, seed: u64) -> Vec<u64> {
    let mut x = seed | 1;
    (0..count)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n as u64
        })
        .collect()
}

#[test]
fn every_gather_path_returns_the_written_records() {
    let dir = tempfile::tempdir().unwrap();
    // Strides give blocks (256 KiB / stride records) of 128, 87, 1 and 43,690 records.
    for (stride, n) in [
        (2048usize, 700usize),
        (3000, 500),
        (300_000, 9),
        (6, 100_000),
    ] {
        for shards in [1u32, 3, 4] {
            let path = dir.path().join(format!("s{stride}-{shards}"));
            let want = write(&path, stride, n, shards);
            for verify in [true, false] {
                let opts = OpenOptions {
                    verify,
                    ..Default::default()
                };
                let view = DenseStore::open_with(&path, opts).unwrap().bind(alloc());
                // A short batch (one thread, grouped when verified), one of >= 1 MiB (split over
                // the pool) and a contiguous range.
                let big = (2 << 20) / stride + 1;
                for idx in [indices(37, n, 5), indices(big, n, 9)] {
                    let b = view.gather(&idx).unwrap();
                    for (k, &i) in idx.iter().enumerate() {
                        assert_eq!(
                            &b.bytes()[k * stride..(k + 1) * stride],
                            &want[i as usize][..],
                            "stride {stride}, {shards} shards, verify {verify}, record {i}"
                        );
                    }
                }
                let b = view.range(0..n as u64).unwrap();
                assert_eq!(b.bytes(), want.concat(), "stride {stride}, {shards} shards");
            }
        }
    }
}

#[test]
fn a_damaged_record_is_named_with_its_shard_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d");
    let stride = 3000;
    let want = write(&path, stride, 500, 3);
    // Block of 87 records: record 200 is the 27th record of block 2, which is shard 2's first.
    let damaged = 200usize;
    let shard = path.join("shard-002.zrd");
    let offset = 64 + 26 * stride;
    let mut b = std::fs::read(&shard).unwrap();
    assert_eq!(&b[offset..offset + stride], &want[damaged][..]);
    b[offset + 1234] ^= 0x01;
    std::fs::write(&shard, &b).unwrap();
    let view = DenseStore::open(&path).unwrap().bind(alloc());
    for idx in [vec![199, 200, 201], (150..260).collect::<Vec<u64>>()] {
        let e = view.gather(&idx).expect_err("the damage must be detected");
        assert!(e.is_corruption(), "{e}");
        assert_eq!(e.corrupt_path(), Some(shard.as_path()), "{e}");
        let text = e.to_string();
        assert!(text.contains(&format!("record {damaged}")), "{text}");
        assert!(text.contains(&offset.to_string()), "{text}");
    }
    assert!(view.gather(&[199, 201]).is_ok());
}
