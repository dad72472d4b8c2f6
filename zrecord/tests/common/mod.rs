//! Shared helpers for the integration tests: a naive oracle and fixture builders.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use zrecord::{Allocator, Codec, DType, DenseWriter, RaggedWriter, SystemAllocator, WriterOptions};

pub fn alloc() -> Arc<dyn Allocator> {
    Arc::new(SystemAllocator::new())
}

/// Deterministic pseudo-random bytes (xorshift), compressible when `low_entropy`.
pub fn bytes(n: usize, seed: u64, low_entropy: bool) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|k| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if low_entropy {
                ((x % 4) as u8).wrapping_add((k / 64) as u8)
            } else {
                x as u8
            }
        })
        .collect()
}

pub fn opts(shards: u32, dict: Option<Vec<u8>>) -> WriterOptions {
    WriterOptions {
        data_shards: shards,
        dict,
        ..WriterOptions::default()
    }
}

/// A small dictionary trained on synthetic samples.
pub fn small_dict() -> Vec<u8> {
    let samples: Vec<Vec<u8>> = (0..200).map(|k| bytes(300, k, true)).collect();
    zrecord::train_dict_from(&samples, 2048).expect("train")
}

/// Writes a Dense fixture and returns the oracle records.
pub fn dense_fixture(
    path: &Path,
    codec: Codec,
    shards: u32,
    n: usize,
    item: &[u64],
) -> Vec<Vec<u8>> {
    let stride: usize = item.iter().product::<u64>() as usize * 2;
    let data = bytes(stride * n, 11, true);
    let dict = (codec == Codec::ZstdDict).then(small_dict);
    let mut w = DenseWriter::create(path, DType::Int16, item, codec, opts(shards, dict)).unwrap();
    w.append(&data).unwrap();
    w.close().unwrap();
    data.chunks(stride).map(<[u8]>::to_vec).collect()
}

/// Writes a Ragged (ndim 2, int32) fixture and returns the oracle (bytes, shape) records.
pub fn ragged_fixture(
    path: &Path,
    codec: Codec,
    shards: u32,
    n: usize,
) -> Vec<(Vec<u8>, Vec<u64>)> {
    let mut recs = Vec::new();
    for k in 0..n {
        let shape = vec![1 + (k as u64 % 3), 2 + (k as u64 * 7 % 5)];
        let len = (shape[0] * shape[1]) as usize * 4;
        recs.push((bytes(len, k as u64 + 3, true), shape));
    }
    write_ragged(path, DType::Int32, 2, codec, shards, &recs);
    recs
}

pub fn write_ragged(
    path: &Path,
    dtype: DType,
    ndim: u32,
    codec: Codec,
    shards: u32,
    recs: &[(Vec<u8>, Vec<u64>)],
) {
    let dict = (codec == Codec::ZstdDict).then(small_dict);
    let mut w = RaggedWriter::create(path, dtype, ndim, codec, opts(shards, dict)).unwrap();
    let (values, cu, shapes) = pack(recs, dtype.itemsize());
    w.append(&values, &cu, &shapes).unwrap();
    w.close().unwrap();
}

pub fn pack(recs: &[(Vec<u8>, Vec<u64>)], isz: usize) -> (Vec<u8>, Vec<i32>, Vec<u64>) {
    let mut values = Vec::new();
    let mut cu = vec![0i32];
    let mut shapes = Vec::new();
    for (b, s) in recs {
        values.extend_from_slice(b);
        cu.push((values.len() / isz) as i32);
        shapes.extend_from_slice(s);
    }
    (values, cu, shapes)
}
