//! Fixtures and oracles: containers written from seeded data, with the records they must read
//! back. [`dense_fixture`], [`ragged_fixture`] and [`write_ragged`] write through the real file
//! system; a [`Spec`] writes through any [`Vfs`] (the reliability suites' in-memory and faulty
//! ones) and [`check_container`] reads a container back against its [`Oracle`].

use std::path::Path;
use std::sync::Arc;

use zrecord::{
    Allocator, Batch, Codec, DType, Dense, DenseWriter, Error, Layout, OpenOptions, Ragged,
    RaggedWriter, Store, SystemAllocator, Vfs, WriterOptions,
};

use super::seeded::{bytes, fine_bytes, small_dict, tiny_dict};

/// The plain CPU allocator, shared.
pub fn alloc() -> Arc<dyn Allocator> {
    Arc::new(SystemAllocator::new())
}

/// Writer options with `shards` data shards and an optional dictionary.
pub fn opts(shards: u32, dict: Option<Vec<u8>>) -> WriterOptions {
    WriterOptions {
        data_shards: shards,
        dict,
        ..WriterOptions::default()
    }
}

/// Writes a Dense (int16, `item` shape) fixture of `n` records and returns the oracle records.
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

/// Writes `recs` as a Ragged container in one append (a `zstd_dict` one with [`small_dict`]).
pub fn write_ragged(
    path: &Path,
    dtype: DType,
    ndim: u32,
    codec: Codec,
    shards: u32,
    recs: &[(Vec<u8>, Vec<u64>)],
) {
    let dict = (codec == Codec::ZstdDict).then(small_dict);
    // Spread over every shard in 64-record runs, as the fixtures' tests expect.
    let o = WriterOptions {
        block_records: Some(64),
        ..opts(shards, dict)
    };
    let mut w = RaggedWriter::create(path, dtype, ndim, codec, o).unwrap();
    let (values, cu, shapes) = pack(recs, dtype.itemsize());
    w.append(&values, &cu, &shapes).unwrap();
    w.close().unwrap();
}

/// How a fixture container is written.
#[derive(Clone, Debug)]
pub struct Spec {
    pub name: &'static str,
    pub ragged: bool,
    pub codec: Codec,
    pub shards: u32,
    pub records: usize,
    /// Dense: elements (uint8) per record; Ragged: max elements (int32) per record.
    pub size: usize,
    /// Appends the records are split into.
    pub appends: usize,
}

/// The records a fixture holds: raw bytes and (Ragged) shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Oracle {
    pub ragged: bool,
    pub recs: Vec<(Vec<u8>, Vec<u64>)>,
}

impl Spec {
    pub fn oracle(&self, seed: u64) -> Oracle {
        let recs = (0..self.records)
            .map(|k| {
                if self.ragged {
                    let n = 1 + (k * 7 + seed as usize) % self.size;
                    (fine_bytes(n * 4, seed + k as u64, true), vec![n as u64])
                } else {
                    (fine_bytes(self.size, seed + k as u64, true), vec![])
                }
            })
            .collect();
        Oracle {
            ragged: self.ragged,
            recs,
        }
    }

    pub fn writer_options(&self, vfs: Arc<dyn Vfs>) -> WriterOptions {
        WriterOptions {
            data_shards: self.shards,
            dict: (self.codec == Codec::ZstdDict).then(tiny_dict),
            vfs,
            // Ragged fixtures spread their few small records over every shard in 64-record runs
            // (a writer's own sizing would put them all in the first shard run).
            block_records: self.ragged.then_some(64),
            ..WriterOptions::default()
        }
    }

    /// Writes the fixture with `opts` and returns what `close()` returned (the writer's own errors
    /// are returned, never unwrapped).
    pub fn write(&self, path: &Path, oracle: &Oracle, opts: WriterOptions) -> zrecord::Result<()> {
        let per = oracle.recs.len().div_ceil(self.appends.max(1)).max(1);
        if self.ragged {
            let mut w = RaggedWriter::create(path, DType::Int32, 1, self.codec, opts)?;
            for chunk in oracle.recs.chunks(per) {
                let (v, cu, sh) = pack(chunk, 4);
                w.append(&v, &cu, &sh)?;
            }
            w.close()
        } else {
            let mut w =
                DenseWriter::create(path, DType::UInt8, &[self.size as u64], self.codec, opts)?;
            for chunk in oracle.recs.chunks(per) {
                let data: Vec<u8> = chunk.iter().flat_map(|r| r.0.iter().copied()).collect();
                w.append(&data)?;
            }
            w.close()
        }
    }
}

/// `recs` as one Ragged append: packed values, `cu_seqlens` (elements of `isz` bytes) and shapes.
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

/// Opens `path` through `vfs`, then reads everything back and compares it with the oracle.
/// `verify` additionally runs `verify()` on a second open. Returns the first error.
pub fn check_container(
    vfs: Arc<dyn super::Fs>,
    path: &Path,
    oracle: &Oracle,
    verify: bool,
) -> Result<(), CheckError> {
    let opts = OpenOptions {
        verify: true,
        vfs,
        ..OpenOptions::default()
    };
    let n = oracle.recs.len() as u64;
    if oracle.ragged {
        let b = gather_all::<Ragged>(path, opts, verify, n)?;
        for (k, (data, shape)) in oracle.recs.iter().enumerate() {
            if b.record(k) != &data[..] || b.shapes()[k..k + 1] != shape[..] {
                return Err(CheckError::Mismatch(format!("record {k} differs")));
            }
        }
    } else {
        let b = gather_all::<Dense>(path, opts, verify, n)?;
        let expect: Vec<u8> = oracle.recs.iter().flat_map(|r| r.0.clone()).collect();
        if b.bytes() != &expect[..] {
            return Err(CheckError::Mismatch("records differ".into()));
        }
    }
    Ok(())
}

/// Opens `path` as a `Store<L>` (and runs `verify()` when `verify`), checks that it holds `n`
/// records and gathers them all.
fn gather_all<L: Layout>(
    path: &Path,
    opts: OpenOptions,
    verify: bool,
    n: u64,
) -> Result<Batch<L>, CheckError> {
    let store = Store::<L>::open_with(path, opts).map_err(CheckError::Zr)?;
    if verify {
        store.verify().map_err(CheckError::Zr)?;
    }
    if store.len() != n {
        return Err(CheckError::Mismatch(format!("len {} != {n}", store.len())));
    }
    let all: Vec<u64> = (0..n).collect();
    store.bind(alloc()).gather(&all).map_err(CheckError::Zr)
}

/// Why a container did not check out.
#[derive(Debug)]
pub enum CheckError {
    Zr(Error),
    Mismatch(String),
}

impl std::fmt::Display for CheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckError::Zr(e) => write!(f, "{e}"),
            CheckError::Mismatch(m) => write!(f, "silent mismatch: {m}"),
        }
    }
}

/// Entries of `dir` that belong to writers (temp directories and their lock files).
pub fn temp_entries(names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|n| n.contains(".zr-tmp-"))
        .cloned()
        .collect()
}

/// Record `i`'s byte in the tiny-record stores of [`tiny_dense`] and [`tiny_ragged`].
pub fn tiny_value(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// Record `i` of a [`tiny_ragged`] store: `1 + i % 3` bytes, from [`tiny_value`].
pub fn tiny_record(i: u64) -> Vec<u8> {
    (0..1 + i % 3).map(|j| tiny_value(i + j)).collect()
}

/// A raw Dense store at `path` of `n` records of one `uint8` each, record `i` [`tiny_value`]`(i)`:
/// 16 bytes of index a record, so a large index from little data.
pub fn tiny_dense(path: &Path, n: u64) {
    let data: Vec<u8> = (0..n).map(tiny_value).collect();
    let mut w = DenseWriter::create(
        path,
        DType::UInt8,
        &[],
        Codec::Raw,
        WriterOptions::default(),
    )
    .unwrap();
    w.append(&data).unwrap();
    w.close().unwrap();
}

/// A raw Ragged store at `path` of `n` records of `uint8`, record `i` [`tiny_record`]`(i)`.
pub fn tiny_ragged(path: &Path, n: u64) {
    let mut w =
        RaggedWriter::create(path, DType::UInt8, 1, Codec::Raw, WriterOptions::default()).unwrap();
    let values: Vec<u8> = (0..n).flat_map(tiny_record).collect();
    let lens: Vec<u64> = (0..n).map(|i| 1 + i % 3).collect();
    let mut cu = vec![0i32];
    for l in &lens {
        cu.push(cu.last().unwrap() + *l as i32);
    }
    w.append(&values, &cu, &lens).unwrap();
    w.close().unwrap();
}
