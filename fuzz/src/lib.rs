//! Fuzz harness of the zrecord reader (T7). Everything goes through the public API: a container
//! is assembled in an in-memory, read-only `Vfs` and opened with `OpenOptions { vfs, .. }`.
//!
//! Three entry points, one per cargo-fuzz target:
//! * [`open_container`]: the input is split into the container's files (manifest, index, shards)
//!   as they are: the fuzzer must get through every checksum on its own (seeded with real
//!   containers);
//! * [`index_decode`]: the input describes the manifest fields and raw index entries; the harness
//!   writes them with *correct* checksums (manifest CRC, index header, page CRCs, shard headers),
//!   so the structural validation behind the checksums (lengths, counts, offsets, limits) is fuzzed;
//! * [`record_decode`]: a consistent container of zstd / zstd+dictionary records whose stored
//!   bytes and declared (decoded) sizes come from the input, with correct record CRCs, so the
//!   decoder sees arbitrary frames that lie about their sizes.
//!
//! Each must return normally for every input: errors are fine, panics, aborts, hangs and huge
//! allocations are not. This file only depends on `zrecord` and `crc32c`, so the stable test
//! `zrecord/tests/fuzz_replay.rs` includes it to replay the corpus without cargo-fuzz.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use zrecord::vfs::ReadFile;
use zrecord::{Allocator, DType, DenseStore, OpenOptions, RaggedStore, ReadFs, SystemAllocator};

/// Where the container lives inside the in-memory file system.
pub const ROOT: &str = "/fz/c";

/// Gathers touch at most this many bytes of decoded output per call (keeps RSS bounded).
const MAX_GATHER_BYTES: u64 = 64 << 20;

// ---------------------------------------------------------------------------------------------
// An in-memory file system, read side only
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Default)]
pub struct RoFs {
    files: HashMap<PathBuf, Arc<Vec<u8>>>,
}

struct Bytes(Arc<Vec<u8>>);
impl ReadFile for Bytes {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl RoFs {
    pub fn new(files: Vec<(String, Vec<u8>)>) -> RoFs {
        RoFs {
            files: files
                .into_iter()
                .map(|(n, d)| (Path::new(ROOT).join(n), Arc::new(d)))
                .collect(),
        }
    }
}

impl ReadFs for RoFs {
    fn exists(&self, path: &Path) -> io::Result<bool> {
        Ok(path == Path::new(ROOT) || self.files.contains_key(path))
    }
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        match self.files.get(path) {
            Some(d) => Ok(Arc::new(Bytes(d.clone()))),
            None => Err(io::Error::new(io::ErrorKind::NotFound, "no such file")),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Exercising an opened container
// ---------------------------------------------------------------------------------------------

fn alloc() -> Arc<dyn Allocator> {
    static A: OnceLock<Arc<SystemAllocator>> = OnceLock::new();
    A.get_or_init(|| Arc::new(SystemAllocator::new())).clone()
}

/// Opens the files as a Dense and as a Ragged container, and when one opens, reads it all:
/// `verify()`, gathers (in bounded batches), single gets, shapes, an out-of-range index.
/// Returns whether either kind opened (the replay test checks that valid seeds do).
pub fn exercise(files: Vec<(String, Vec<u8>)>) -> bool {
    let mut opened = false;
    let vfs: Arc<dyn ReadFs> = Arc::new(RoFs::new(files));
    let opts = OpenOptions {
        verify: true,
        vfs,
        ..OpenOptions::default()
    };
    if let Ok(st) = DenseStore::open_with(ROOT, opts.clone()) {
        opened = true;
        let _ = st.verify();
        let n = st.len();
        let per = (MAX_GATHER_BYTES / st.record_bytes().max(1)).clamp(1, 4096);
        let v = st.bind(alloc());
        let mut i = 0;
        while i < n.min(1 << 16) {
            let idx: Vec<u64> = (i..(i + per).min(n)).collect();
            let _ = v.gather(&idx);
            i += per;
        }
        let _ = v.gather(&[n, u64::MAX]);
        if n > 0 {
            let _ = v.get(n - 1);
            let _ = v.range(0..n.min(per));
        }
    }
    if let Ok(st) = RaggedStore::open_with(ROOT, opts) {
        opened = true;
        let _ = st.verify();
        let n = st.len();
        let v = st.bind(alloc());
        let mut i = 0;
        while i < n.min(1 << 16) {
            // Gather in batches whose decoded size stays bounded.
            let mut idx = Vec::new();
            let mut bytes = 0u64;
            while i < n && idx.len() < 4096 {
                let sz = v
                    .shape_of(i)
                    .map(|s| {
                        s.iter()
                            .product::<u64>()
                            .saturating_mul(st.dtype().itemsize() as u64)
                    })
                    .unwrap_or(0);
                if !idx.is_empty() && bytes.saturating_add(sz) > MAX_GATHER_BYTES {
                    break;
                }
                bytes = bytes.saturating_add(sz);
                idx.push(i);
                i += 1;
            }
            if bytes <= MAX_GATHER_BYTES {
                let _ = v.gather(&idx);
            }
        }
        let _ = v.gather(&[n]);
        let _ = v.shape_of(u64::MAX);
    }
    opened
}

// ---------------------------------------------------------------------------------------------
// Input decoding helpers
// ---------------------------------------------------------------------------------------------

/// Reads little-endian values from the input; returns zeros once it is exhausted.
pub struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Cursor { data, pos: 0 }
    }
    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }
    /// A "size-like" value: mostly small, sometimes huge or at a boundary.
    pub fn size(&mut self) -> u64 {
        match self.u8() % 8 {
            0..=4 => u64::from(self.u8()),
            5 => u64::from(self.u16()),
            6 => [
                0,
                1,
                (1 << 31) - 1,
                1 << 31,
                (1 << 31) + 1,
                1 << 32,
                u64::MAX / 2,
                u64::MAX,
            ][(self.u8() % 8) as usize],
            _ => self.u64(),
        }
    }
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        let end = self.pos.saturating_add(n).min(self.data.len());
        self.pos = self.pos.saturating_add(n);
        &self.data[start..end]
    }
    pub fn rest(&mut self) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        self.pos = self.data.len();
        &self.data[start..]
    }
    pub fn exhausted(&self) -> bool {
        self.pos >= self.data.len()
    }
}

fn shard_name(s: u32) -> String {
    format!("shard-{s:03}.zrd")
}

// ---------------------------------------------------------------------------------------------
// Target 1: raw files
// ---------------------------------------------------------------------------------------------

/// Framing of the `open_container` input: byte 0 = number of shard files (mod 5), then for each
/// file (manifest, index, shards...) a u16 length followed by that many bytes; the last file takes
/// whatever is left when its length runs past the end.
pub fn split_files(data: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut c = Cursor::new(data);
    let nshards = u32::from(c.u8() % 5);
    let mut names = vec!["manifest.zrm".to_string(), "index.zri".to_string()];
    names.extend((0..nshards).map(shard_name));
    let mut files = Vec::new();
    for n in names {
        if c.exhausted() {
            break;
        }
        let len = c.u16() as usize;
        files.push((n, c.take(len).to_vec()));
    }
    files
}

/// Inverse of [`split_files`] for seeds (files longer than 64 KiB are cut).
pub fn join_files(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let shards = files
        .iter()
        .filter(|(n, _)| n.starts_with("shard-"))
        .count();
    let mut out = vec![shards as u8];
    let order = |n: &str| match n {
        "manifest.zrm" => 0,
        "index.zri" => 1,
        _ => 2,
    };
    let mut fs: Vec<&(String, Vec<u8>)> = files.iter().collect();
    fs.sort_by_key(|(n, _)| (order(n), n.clone()));
    for (_, d) in fs {
        let d = &d[..d.len().min(u16::MAX as usize)];
        out.extend_from_slice(&(d.len() as u16).to_le_bytes());
        out.extend_from_slice(d);
    }
    out
}

pub fn open_container(data: &[u8]) -> bool {
    exercise(split_files(data))
}

// ---------------------------------------------------------------------------------------------
// Container assembly with correct checksums (format in docs/format.md)
// ---------------------------------------------------------------------------------------------

const PAGE_ENTRIES: u64 = 4096;

fn dict_id(dict: &[u8]) -> u32 {
    if dict.len() >= 8 && dict[..4] == [0x37, 0xA4, 0x30, 0xEC] {
        u32::from_le_bytes([dict[4], dict[5], dict[6], dict[7]])
    } else {
        0
    }
}

fn record_seed(uuid: &[u8; 16], i: u64) -> u32 {
    let mut b = [0u8; 24];
    b[..16].copy_from_slice(uuid);
    b[16..].copy_from_slice(&i.to_le_bytes());
    crc32c::crc32c(&b)
}

fn page_seed(uuid: &[u8; 16], page: u64) -> u32 {
    let mut b = [0u8; 25];
    b[..16].copy_from_slice(uuid);
    b[16..24].copy_from_slice(&page.to_le_bytes());
    b[24] = 0xA5;
    crc32c::crc32c(&b)
}

fn header(magic: &[u8; 8], a: u32, uuid: &[u8; 16], b: u64, c: u32) -> Vec<u8> {
    let mut h = vec![0u8; 64];
    h[..8].copy_from_slice(magic);
    h[8..12].copy_from_slice(&1u32.to_le_bytes());
    h[12..16].copy_from_slice(&a.to_le_bytes());
    h[16..32].copy_from_slice(uuid);
    h[32..40].copy_from_slice(&b.to_le_bytes());
    h[40..44].copy_from_slice(&c.to_le_bytes());
    let crc = crc32c::crc32c(&h[..60]);
    h[60..].copy_from_slice(&crc.to_le_bytes());
    h
}

fn shard_header(uuid: &[u8; 16], shard: u32, shards: u32) -> Vec<u8> {
    // Shard header: magic, version, shard number, uuid, shard count (u32), zeros, crc.
    let mut h = header(b"ZRECSHD\0", shard, uuid, u64::from(shards), 0);
    h[36..60].fill(0);
    h[32..36].copy_from_slice(&shards.to_le_bytes());
    let crc = crc32c::crc32c(&h[..60]);
    h[60..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Everything the manifest says, possibly lying.
#[derive(Clone, Debug)]
pub struct Desc {
    pub ragged: bool,
    pub codec: u8,
    pub dtype: DType,
    pub ndim: u32,
    pub item_shape: Vec<u64>,
    pub records: u64,
    pub block: u64,
    pub dict: Vec<u8>,
    pub index_len: Option<u64>,
    /// Per shard: (declared len override, declared records override).
    pub shard_overrides: Vec<(Option<u64>, Option<u64>)>,
}

pub fn records_in_shard(records: u64, block: u64, shards: u32, s: u32) -> u64 {
    let full = records / block;
    let tail = records % block;
    let (s, n) = (u64::from(s), u64::from(shards));
    let mut count = (full / n).saturating_mul(block);
    if full % n > s {
        count = count.saturating_add(block);
    }
    if full % n == s {
        count = count.saturating_add(tail);
    }
    count
}

/// Encodes the manifest of `d` with a correct CRC.
pub fn manifest(d: &Desc, uuid: &[u8; 16], shard_files: &[(u64, u32)], index_len: u64) -> Vec<u8> {
    let nshards = shard_files.len() as u32;
    let entry = 16u32.wrapping_add(if d.ragged {
        8u32.wrapping_mul(d.ndim)
    } else {
        0
    });
    let dense_dims = if d.ragged { 0 } else { d.item_shape.len() };
    let total = 128 + 8 * dense_dims + 24 * shard_files.len() + d.dict.len() + 4;
    let mut b = Vec::with_capacity(total);
    b.extend_from_slice(b"ZRECMAN\0");
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&(total as u32).to_le_bytes());
    b.extend_from_slice(uuid);
    b.push(u8::from(d.ragged));
    b.push(d.codec);
    let name = d.dtype.name().as_bytes();
    b.push(name.len() as u8);
    b.push(0);
    b.extend_from_slice(&(d.dtype.itemsize() as u32).to_le_bytes());
    b.extend_from_slice(&d.ndim.to_le_bytes());
    b.extend_from_slice(&nshards.to_le_bytes());
    b.extend_from_slice(&d.records.to_le_bytes());
    b.extend_from_slice(&d.block.to_le_bytes());
    b.extend_from_slice(&3i32.to_le_bytes());
    b.extend_from_slice(&(d.dict.len() as u32).to_le_bytes());
    b.extend_from_slice(&dict_id(&d.dict).to_le_bytes());
    b.extend_from_slice(&entry.to_le_bytes());
    b.extend_from_slice(&index_len.to_le_bytes());
    b.extend_from_slice(&[0u8; 8]);
    let mut padded = [0u8; 32];
    padded[..name.len()].copy_from_slice(name);
    b.extend_from_slice(&padded);
    for &x in d.item_shape.iter().take(dense_dims) {
        b.extend_from_slice(&x.to_le_bytes());
    }
    for (s, &(len, crc)) in shard_files.iter().enumerate() {
        let (lo, ro) = d.shard_overrides.get(s).copied().unwrap_or((None, None));
        b.extend_from_slice(&lo.unwrap_or(len).to_le_bytes());
        let recs =
            ro.unwrap_or_else(|| records_in_shard(d.records, d.block.max(1), nshards, s as u32));
        b.extend_from_slice(&recs.to_le_bytes());
        b.extend_from_slice(&crc.to_le_bytes());
        b.extend_from_slice(&[0u8; 4]);
    }
    b.extend_from_slice(&d.dict);
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// Index file for `entries` (already encoded, `entry` bytes each) with correct page CRCs.
pub fn index_file(uuid: &[u8; 16], records: u64, entry: usize, entries: &[u8]) -> Vec<u8> {
    let mut out = header(
        b"ZRECIDX\0",
        entry as u32,
        uuid,
        records,
        PAGE_ENTRIES as u32,
    );
    for (page, chunk) in entries
        .chunks(PAGE_ENTRIES as usize * entry.max(1))
        .enumerate()
    {
        out.extend_from_slice(chunk);
        let crc = crc32c::crc32c_append(page_seed(uuid, page as u64), chunk);
        out.extend_from_slice(&crc.to_le_bytes());
    }
    out
}

fn entry_bytes(offset: u64, flags: u8, len: u32, crc: u32, shape: &[u64], out: &mut Vec<u8>) {
    out.extend_from_slice(&((offset & ((1 << 56) - 1)) | (u64::from(flags) << 56)).to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    for s in shape {
        out.extend_from_slice(&s.to_le_bytes());
    }
}

fn dtype_from(b: u8) -> DType {
    DType::ALL[b as usize % DType::ALL.len()]
}

// ---------------------------------------------------------------------------------------------
// Target 2: index / manifest structure behind correct checksums
// ---------------------------------------------------------------------------------------------

pub fn index_decode(data: &[u8]) -> bool {
    let mut c = Cursor::new(data);
    let uuid = [7u8; 16];
    let ragged = c.u8() & 1 == 1;
    let codec = c.u8() % 4; // 3 = invalid codec
    let dtype = dtype_from(c.u8());
    let ndim = match c.u8() % 8 {
        7 => c.u32(),
        k => u32::from(k % 4),
    };
    let dims = if ragged { 0 } else { ndim.min(40) as usize };
    let item_shape: Vec<u64> = (0..dims).map(|_| c.size()).collect();
    let nshards = match c.u8() % 8 {
        7 => u32::from(c.u8()) + 1, // 1..=256
        k => u32::from(k % 4) + 1,
    };
    let records = c.size();
    let block = c.size();
    let dict = if codec == 2 || c.u8().is_multiple_of(16) {
        let n = c.u8() as usize;
        c.take(n).to_vec()
    } else {
        Vec::new()
    };
    let entry = 16 + if ragged { 8 * ndim.min(64) as usize } else { 0 };
    // Entries: as many as the input provides (bounded), raw from the input.
    let n_entries = records.min(2048) as usize;
    let mut entries = Vec::new();
    let mut payload_len: Vec<u64> = vec![0; nshards as usize];
    for i in 0..n_entries {
        if c.exhausted() {
            break;
        }
        let mode = c.u8();
        let offset = c.u64();
        let flags = c.u8();
        let len = c.u32();
        let crc = c.u32();
        let shape: Vec<u64> = (0..(entry - 16) / 8).map(|_| c.size()).collect();
        // Sometimes make the offset consistent so validation goes further.
        let s = ((i as u64 / block.max(1)) % u64::from(nshards)) as usize;
        let off = if mode & 1 == 0 {
            64 + payload_len[s]
        } else {
            offset
        };
        payload_len[s] = payload_len[s].saturating_add(u64::from(len % 4096));
        entry_bytes(off, flags, len, crc, &shape, &mut entries);
    }
    let index = index_file(&uuid, records, entry, &entries);
    let index_len = match c.u8() % 4 {
        0 => c.size(),
        _ => index.len() as u64,
    };
    let mut files = vec![];
    let mut descs = vec![];
    for s in 0..nshards.min(8) {
        let mut f = shard_header(&uuid, s, nshards);
        let n = payload_len[s as usize].min(1 << 16) as usize;
        f.extend_from_slice(c.take(n));
        f.resize(64 + n, 0);
        descs.push((f.len() as u64, crc32c::crc32c(&f)));
        files.push((shard_name(s), f));
    }
    // Shard descriptors beyond the files that exist (nshards up to 256).
    while descs.len() < nshards as usize {
        descs.push((64, 0));
    }
    let overrides = (0..nshards)
        .map(|_| match c.u8() % 8 {
            0 => (Some(c.size()), None),
            1 => (None, Some(c.size())),
            _ => (None, None),
        })
        .collect();
    let d = Desc {
        ragged,
        codec,
        dtype,
        ndim,
        item_shape,
        records,
        block,
        dict,
        index_len: Some(index_len),
        shard_overrides: overrides,
    };
    files.push((
        "manifest.zrm".into(),
        manifest(&d, &uuid, &descs, index_len),
    ));
    files.push(("index.zri".into(), index));
    exercise(files)
}

// ---------------------------------------------------------------------------------------------
// Target 3: record decode (zstd / dictionary frames with lying sizes)
// ---------------------------------------------------------------------------------------------

/// A small real zstd dictionary (trained once).
pub fn fuzz_dict() -> &'static [u8] {
    static D: OnceLock<Vec<u8>> = OnceLock::new();
    D.get_or_init(|| {
        let samples: Vec<Vec<u8>> = (0..100u32)
            .map(|k| {
                (0..160u32)
                    .map(|j| ((j * 7 + k) % 13) as u8 + (j / 40) as u8)
                    .collect()
            })
            .collect();
        zrecord::train_dict_from(&samples, 1024).unwrap_or_default()
    })
}

/// Builds a self-consistent container (offsets tile the shards, every CRC correct) from records
/// given as (stored bytes, compressed?, declared shape) and exercises it.
#[allow(clippy::too_many_arguments)]
pub fn consistent_container(
    ragged: bool,
    codec: u8,
    dtype: DType,
    item_shape: &[u64],
    ndim: u32,
    nshards: u32,
    block: u64,
    recs: &[(Vec<u8>, bool, Vec<u64>)],
    dict: Vec<u8>,
) -> Vec<(String, Vec<u8>)> {
    let uuid = [9u8; 16];
    let mut shards: Vec<Vec<u8>> = (0..nshards)
        .map(|s| shard_header(&uuid, s, nshards))
        .collect();
    let entry = 16 + if ragged { 8 * ndim as usize } else { 0 };
    let mut entries = Vec::new();
    for (i, (stored, compressed, shape)) in recs.iter().enumerate() {
        let s = ((i as u64 / block) % u64::from(nshards)) as usize;
        let off = shards[s].len() as u64;
        shards[s].extend_from_slice(stored);
        let crc = crc32c::crc32c_append(record_seed(&uuid, i as u64), stored);
        let flags = u8::from(!compressed);
        let shape: Vec<u64> = if ragged { shape.clone() } else { vec![] };
        entry_bytes(off, flags, stored.len() as u32, crc, &shape, &mut entries);
    }
    let records = recs.len() as u64;
    let index = index_file(&uuid, records, entry, &entries);
    let descs: Vec<(u64, u32)> = shards
        .iter()
        .map(|f| (f.len() as u64, crc32c::crc32c(f)))
        .collect();
    let d = Desc {
        ragged,
        codec,
        dtype,
        ndim,
        item_shape: item_shape.to_vec(),
        records,
        block,
        dict,
        index_len: None,
        shard_overrides: vec![],
    };
    let mut files = vec![
        (
            "manifest.zrm".to_string(),
            manifest(&d, &uuid, &descs, index.len() as u64),
        ),
        ("index.zri".to_string(), index),
    ];
    for (s, f) in shards.into_iter().enumerate() {
        files.push((shard_name(s as u32), f));
    }
    files
}

pub fn record_decode(data: &[u8]) -> bool {
    let mut c = Cursor::new(data);
    let mode = c.u8();
    let ragged = mode & 1 == 1;
    let use_dict = mode & 2 == 2;
    let nshards = u32::from(c.u8() % 3) + 1;
    let block = u64::from(c.u8() % 4) + 1;
    let dtype = dtype_from(c.u8() % 4); // small itemsizes
    let isz = dtype.itemsize() as u64;
    // Dense: one declared record size for all; Ragged: per record.
    let dense_elems = match c.u8() % 4 {
        0 => u64::from(c.u16()),
        1 => u64::from(c.u32() % (1 << 24)),
        _ => u64::from(c.u8()) + 1,
    };
    let n = (c.u8() % 8) as usize + 1;
    let mut recs = Vec::new();
    for _ in 0..n {
        let declared = if ragged {
            match c.u8() % 4 {
                0 => u64::from(c.u32() % (1 << 24)),
                _ => u64::from(c.u16()) + 1,
            }
        } else {
            dense_elems
        };
        let len = c.u16() as usize % 4096;
        let stored = c.take(len).to_vec();
        // Compressed records must be shorter than the decoded size (else the writer stores raw).
        let compressed = (stored.len() as u64) < declared.saturating_mul(isz) && !stored.is_empty();
        let stored = if compressed {
            stored
        } else {
            let mut s = stored;
            s.resize((declared * isz).min(1 << 16) as usize, 0);
            s
        };
        let declared = if compressed {
            declared
        } else {
            stored.len() as u64 / isz
        };
        recs.push((stored, compressed, vec![declared.max(1)]));
    }
    let (codec, dict) = if use_dict {
        (2, fuzz_dict().to_vec())
    } else {
        (1, Vec::new())
    };
    if codec == 2 && dict.is_empty() {
        return false;
    }
    let item = [if ragged { 1 } else { dense_elems }];
    let files = consistent_container(ragged, codec, dtype, &item, 1, nshards, block, &recs, dict);
    exercise(files)
}

// ---------------------------------------------------------------------------------------------
// version_manifest: a dataset's version manifest behind its checksum
// ---------------------------------------------------------------------------------------------

/// The input is a dataset version manifest without its CRC32C: decoded as it is, then with its
/// length set and its CRC appended, so the checks behind the checksum (schemas, names, counts
/// against the bytes left, record sums) are fuzzed. A manifest that decodes must re-encode to its
/// bytes, its parts' records adding up to its count. Returns whether it decoded.
pub fn version_manifest(data: &[u8]) -> bool {
    use zrecord::dataset::VersionManifest;
    let path = Path::new("/fz/versions/00000000000000000001.zrv");
    let _ = VersionManifest::decode(data, path);
    if data.len() < 12 {
        return false;
    }
    let mut b = data.to_vec();
    let total = (b.len() + 4) as u32;
    b[8..12].copy_from_slice(&total.to_le_bytes());
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    match VersionManifest::decode(&b, path) {
        Ok(m) => {
            assert_eq!(
                m.encode(),
                b,
                "a decoded version manifest re-encodes to its bytes"
            );
            let sum = m
                .parts
                .iter()
                .try_fold(0u64, |s, p| s.checked_add(p.records));
            assert_eq!(sum, Some(m.records()));
            true
        }
        Err(_) => false,
    }
}
