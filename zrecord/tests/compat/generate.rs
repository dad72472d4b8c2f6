//! The golden containers' generator: the formulas every case's records come from (shapes,
//! element values, the noise of the incompressible record, the trained dictionary), writing a
//! case as the generator does, and reading back and hashing the committed files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use zrecord::{Allocator, Codec, DenseWriter, RaggedWriter, SystemAllocator, WriterOptions};

use super::{Case, DICT_BYTES, DICT_SAMPLES};

pub(crate) fn golden_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

pub(crate) fn alloc() -> Arc<dyn Allocator> {
    Arc::new(SystemAllocator::new())
}

/// Deterministic noise (xorshift64) for the incompressible record.
pub(crate) fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Shape of Ragged record `i` of `case`.
pub(crate) fn ragged_shape(case: &Case, i: u64) -> Vec<u64> {
    match case.name {
        "ragged_raw_i32" => vec![1 + i % 3, 2 + (i * 7) % 5],
        "ragged_zstd_u16" => vec![2 + i % 3, 16 + i % 5],
        "ragged_zstd_dict_bf16" => vec![1 + i % 2, 2, 8 + i % 3],
        other => panic!("no ragged shape for case {other}"),
    }
}

/// Shape of record `i` (Dense: the item shape).
pub(crate) fn shape(case: &Case, i: u64) -> Vec<u64> {
    if case.ragged {
        ragged_shape(case, i)
    } else {
        case.item_shape.to_vec()
    }
}

/// The bytes of record `i` of `case` (little-endian elements), defined for every `i`.
pub(crate) fn record(case: &Case, i: u64) -> Vec<u8> {
    let n = shape(case, i).iter().product::<u64>();
    let mut out = Vec::new();
    for j in 0..n {
        match case.name {
            "dense_raw_f32" => {
                let v = i as f32 * 10.0 + j as f32 * 0.25 - 1.5;
                out.extend_from_slice(&v.to_le_bytes());
            }
            "dense_zstd_i16" => {
                let v = ((i * 7 + j / 4) % 5) as i16 - 2;
                out.extend_from_slice(&v.to_le_bytes());
            }
            "dense_zstd_dict_u8" => out.push(((j / 8 + i) % 6) as u8 * 40 + (j % 3) as u8),
            "dense_scalar_f64" => out.extend_from_slice(&(i as f64 * 1.5 - 2.0).to_le_bytes()),
            "ragged_raw_i32" => {
                let v = i as i32 * 1000 + j as i32 - 500;
                out.extend_from_slice(&v.to_le_bytes());
            }
            "ragged_zstd_u16" => {
                let v = (j % 7) as u16 * 3 + (i % 4) as u16;
                out.extend_from_slice(&v.to_le_bytes());
            }
            "ragged_zstd_dict_bf16" => {
                let f = (j % 5) as f32 + 0.5 * (i % 3) as f32;
                out.extend_from_slice(&((f.to_bits() >> 16) as u16).to_le_bytes());
            }
            other => panic!("no values for case {other}"),
        }
    }
    if case.name == "dense_zstd_i16" && i == 3 {
        return noise(out.len(), i + 1);
    }
    out
}

/// The dictionary of a `zstd_dict` case, trained on records of the same formulas.
pub(crate) fn dictionary(case: &Case) -> Option<Vec<u8>> {
    (case.codec == Codec::ZstdDict).then(|| {
        let samples: Vec<Vec<u8>> = (0..DICT_SAMPLES).map(|i| record(case, i)).collect();
        zrecord::train_dict_from(&samples, DICT_BYTES).expect("train the golden dictionary")
    })
}

/// Writes `case` to `path` exactly as the generator does.
pub(crate) fn write_case(case: &Case, path: &Path) {
    let opts = WriterOptions {
        data_shards: case.shards,
        dict: dictionary(case),
        // Durability does not change a byte of the container.
        sync: false,
        // The golden Ragged cases were written with 64-record blocks (the writer now sizes a
        // Ragged block by its first append).
        block_records: case.ragged.then_some(64),
        ..WriterOptions::default()
    };
    if case.ragged {
        let mut w = RaggedWriter::create(path, case.dtype, case.ndim, case.codec, opts)
            .expect("create ragged writer");
        let isz = case.dtype.itemsize();
        let (mut values, mut cu, mut shapes) = (Vec::new(), vec![0i32], Vec::new());
        for i in 0..case.records {
            values.extend_from_slice(&record(case, i));
            cu.push((values.len() / isz) as i32);
            shapes.extend_from_slice(&ragged_shape(case, i));
        }
        w.append(&values, &cu, &shapes).expect("append");
        w.close().expect("close");
    } else {
        let mut w = DenseWriter::create(path, case.dtype, case.item_shape, case.codec, opts)
            .expect("create dense writer");
        let data: Vec<u8> = (0..case.records).flat_map(|i| record(case, i)).collect();
        w.append(&data).expect("append");
        w.close().expect("close");
    }
}

/// The published files of the container at `dir`, by file name.
pub(crate) fn read_container(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    zrecord::container_files(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (name, bytes)
        })
        .collect()
}

/// Every file under the golden root, as `case/file`, with its SHA-256.
pub(crate) fn golden_digests() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let root = golden_root();
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    for d in dirs {
        let case = d.file_name().unwrap().to_string_lossy().into_owned();
        if case.starts_with('.') {
            // `.gitattributes` (keeps git from converting the binary files).
            continue;
        }
        assert!(d.is_dir(), "stray file {} in the golden root", d.display());
        for f in std::fs::read_dir(&d).unwrap() {
            let p = f.unwrap().path();
            let file = p.file_name().unwrap().to_string_lossy().into_owned();
            let bytes = std::fs::read(&p).unwrap();
            let hex: String = Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            out.insert(format!("{case}/{file}"), hex);
        }
    }
    out
}
