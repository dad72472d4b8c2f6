//! Store fixtures shared by the integration tests.
#![allow(dead_code)]

pub mod loader;

use std::path::{Path, PathBuf};

use zrecord::{Codec, DType, DenseWriter, RaggedWriter, WriterOptions};

/// A Dense store of `n` 0-D `uint64` records whose value is their index, plus `pad` extra `u64`s per
/// record (item shape `(1 + pad,)` then) so batches can be made larger.
pub fn dense_index_store(dir: &Path, name: &str, n: u64, pad: usize) -> PathBuf {
    let path = dir.join(name);
    let shape: Vec<u64> = if pad == 0 {
        vec![]
    } else {
        vec![1 + pad as u64]
    };
    let mut w = DenseWriter::create(
        &path,
        DType::UInt64,
        &shape,
        Codec::Raw,
        WriterOptions::default(),
    )
    .unwrap();
    let mut data = Vec::with_capacity(n as usize * 8 * (1 + pad));
    for i in 0..n {
        data.extend_from_slice(&i.to_le_bytes());
        for _ in 0..pad {
            data.extend_from_slice(&i.wrapping_mul(3).to_le_bytes());
        }
    }
    w.append(&data).unwrap();
    w.close().unwrap();
    path
}

/// A Ragged 1-D `int32` store: record `i` holds `i % 4 + 1` copies of `i`.
pub fn ragged_index_store(dir: &Path, name: &str, n: u64) -> PathBuf {
    let path = dir.join(name);
    let mut w =
        RaggedWriter::create(&path, DType::Int32, 1, Codec::Raw, WriterOptions::default()).unwrap();
    let mut values = Vec::new();
    let mut cu = vec![0i32];
    let mut shapes = Vec::new();
    for i in 0..n {
        let k = i % 4 + 1;
        for _ in 0..k {
            values.extend_from_slice(&(i as i32).to_le_bytes());
        }
        cu.push(cu.last().unwrap() + k as i32);
        shapes.push(k);
    }
    w.append(&values, &cu, &shapes).unwrap();
    w.close().unwrap();
    path
}

/// The first `u64` of each record of a Dense batch of index-valued records.
pub fn dense_ids(bytes: &[u8], stride: usize) -> Vec<u64> {
    bytes
        .chunks_exact(stride)
        .map(|r| u64::from_le_bytes(r[..8].try_into().unwrap()))
        .collect()
}
