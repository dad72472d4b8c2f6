//! Opening a container: [`OpenOptions`], and the validation every open does before the first
//! read (manifest, index length and header, every index page checksum, every shard's length and
//! header, and a structural check that the records tile each shard exactly). Also the per-record
//! index lookups the later stages share, and [`container_files`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Location, Result};
use crate::format::{
    self, Codec, Entry, FLAG_STORED_RAW, HEADER_LEN, INDEX_FILE, Kind, MANIFEST_FILE,
    MAX_RECORD_BYTES, Manifest,
};
use crate::vfs::{ReadFile, StdFs, Vfs};

use super::fixed::Fixed;

/// How to open a store.
#[derive(Clone)]
pub struct OpenOptions {
    /// Verify each record's CRC32C on every read (default `true`).
    pub verify: bool,
    /// File system to read through.
    pub vfs: Arc<dyn Vfs>,
    /// When a gather requests all of its records from the device before copying (default
    /// [`ColdReads::Auto`]).
    pub cold_reads: ColdReads,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            verify: true,
            vfs: Arc::new(StdFs),
            cold_reads: ColdReads::Auto,
        }
    }
}

impl fmt::Debug for OpenOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenOptions")
            .field("verify", &self.verify)
            .field("cold_reads", &self.cold_reads)
            .finish()
    }
}

/// When a gather first asks the kernel to read all of its records (see `docs/performance.md`,
/// "Cold reads").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ColdReads {
    /// Probe the page-cache residency of a few of the batch's records (`mincore`, one call
    /// each) and take the cold path when any of them is not resident: raw records are read past
    /// the page cache (`O_DIRECT`) when the store's shards hold more than half of the machine's
    /// memory, else every record is requested through the page cache (read-ahead), so a store
    /// that fits in memory becomes warm over its first epoch. The default.
    #[default]
    Auto,
    /// For a store known to be larger than memory: no probe; every gather of raw records reads
    /// them past the page cache (`O_DIRECT`), compressed ones are requested through it.
    Always,
    /// Never: every gather is a plain copy, faulting pages in one at a time.
    Never,
}

/// Whether `data_bytes` of shards are more than half of this machine's memory (`sysinfo`): such a
/// store cannot all stay in the page cache, so reading its cold records past the cache keeps
/// them from evicting the rest. `false` where the size of memory is unknown.
fn outgrows_memory(data_bytes: u64) -> bool {
    // SAFETY: sysinfo only writes the struct it is given, which is plain data.
    let ram = unsafe {
        let mut info: libc::sysinfo = std::mem::zeroed();
        if libc::sysinfo(&mut info) != 0 {
            return false;
        }
        (info.totalram as u64).saturating_mul(u64::from(info.mem_unit.max(1)))
    };
    ram > 0 && data_bytes > ram / 2
}

/// Indexes up to this size (64 MiB: 4 Mi records of 16-byte entries) are copied into process
/// memory at open; larger ones stay memory-mapped.
pub(super) const INDEX_IN_MEMORY_BYTES: usize = 64 << 20;

/// An index file's bytes held in process memory.
struct InMemory(Vec<u8>);

impl ReadFile for InMemory {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// An open, validated container: what every store and view of it shares.
pub(super) struct Inner {
    pub(super) path: PathBuf,
    pub(super) m: Manifest,
    pub(super) shard_paths: Vec<PathBuf>,
    pub(super) shards: Vec<Arc<dyn ReadFile>>,
    pub(super) index: Arc<dyn ReadFile>,
    pub(super) index_path: PathBuf,
    pub(super) entry: usize,
    pub(super) stride: u64,
    pub(super) ddict: Option<zstd::dict::DecoderDictionary<'static>>,
    pub(super) verify: bool,
    /// The cold-read policy (`read::cold`).
    pub(super) cold: ColdReads,
    /// The shards hold more than half of the machine's memory: a cold batch of raw records is
    /// read past the page cache under [`ColdReads::Auto`] (`read::cold`).
    pub(super) outgrows_memory: bool,
    /// CRC32C of the container id, the common prefix of every record's checksum seed.
    pub(super) uuid_crc: u32,
    /// Record → shard, precomputed from the manifest.
    pub(super) shard_map: format::ShardMap,
    /// Consecutive gathers under [`ColdReads::Auto`] that found (or, probing only now and then,
    /// took) the batch resident (`read::cold`).
    pub(super) warm_gathers: std::sync::atomic::AtomicU32,
    /// A raw Dense store's layout and checksum table (`read::fixed`), set once the entries are
    /// validated; `None` for other stores and before that.
    pub(super) fixed: Option<Fixed>,
    pub(super) closed: AtomicBool,
}

impl Inner {
    pub(super) fn open(path: &Path, kind: Kind, opts: &OpenOptions) -> Result<Inner> {
        let vfs = &opts.vfs;
        let mp = path.join(MANIFEST_FILE);
        let not_found = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
        let mfile = match vfs.open_read(&mp) {
            Ok(f) => f,
            Err(e) if not_found(&e) && !vfs.exists(path).unwrap_or(false) => {
                return Err(Error::io("open", path, e));
            }
            // The directory exists now; it may have been published (renamed into place, manifest
            // included) between the two calls, so look once more before calling it foreign.
            Err(e) if not_found(&e) => vfs.open_read(&mp).map_err(|e| {
                if not_found(&e) {
                    Error::format(
                        path,
                        "no manifest.zrm: not a zrecord container (or not published)",
                    )
                } else {
                    Error::io("open", &mp, e)
                }
            })?,
            Err(e) => return Err(Error::io("open", &mp, e)),
        };
        let m = Manifest::decode(mfile.bytes(), &mp)?;
        if m.kind != kind {
            let (want, got) = match kind {
                Kind::Dense => ("Dense", "Ragged"),
                Kind::Ragged => ("Ragged", "Dense"),
            };
            return Err(Error::format(
                path,
                format!("expected a {want} container, found a {got} one"),
            ));
        }
        let index_path = path.join(INDEX_FILE);
        let index = vfs
            .open_read(&index_path)
            .map_err(|e| missing_or_io(&index_path, None, e))?;
        let ib = index.bytes();
        if ib.len() as u64 != m.index_len {
            return Err(Error::corrupt(
                Location {
                    path: index_path.clone(),
                    ..Default::default()
                },
                "index file length",
                m.index_len,
                ib.len(),
            ));
        }
        let entry = m.entry_size();
        format::check_header(
            ib,
            &format::encode_index_header(&m.uuid, m.records, entry),
            &index_path,
            None,
            "index header",
        )?;
        // Verify every index page checksum.
        let page_bytes = format::PAGE_ENTRIES as usize * entry;
        let mut pos = HEADER_LEN;
        let mut page = 0u64;
        let mut left = m.records;
        while left > 0 {
            let k = left.min(format::PAGE_ENTRIES) as usize;
            let body = &ib[pos..pos + k * entry];
            let stored = format::rd_u32(ib, pos + k * entry);
            let actual = crate::crc::append(format::page_seed(&m.uuid, page), body);
            if stored != actual {
                return Err(Error::corrupt(
                    Location {
                        path: index_path.clone(),
                        offset: Some((pos + k * entry) as u64),
                        ..Default::default()
                    },
                    format!("index page {page} crc32c"),
                    format!("{actual:#010x}"),
                    format!("{stored:#010x}"),
                ));
            }
            debug_assert!(k * entry <= page_bytes);
            pos += k * entry + 4;
            left -= k as u64;
            page += 1;
        }
        let nshards = m.shard_count();
        let mut shards = Vec::with_capacity(nshards as usize);
        let mut shard_paths = Vec::with_capacity(nshards as usize);
        for s in 0..nshards {
            let p = path.join(format::shard_file_name(s));
            let f = vfs
                .open_read(&p)
                .map_err(|e| missing_or_io(&p, Some(s), e))?;
            let b = f.bytes();
            let want = m.shards[s as usize].len;
            if b.len() as u64 != want {
                return Err(Error::corrupt(
                    Location {
                        path: p.clone(),
                        shard: Some(s),
                        ..Default::default()
                    },
                    "shard file length",
                    want,
                    b.len(),
                ));
            }
            format::check_header(
                b,
                &format::encode_shard_header(&m.uuid, s, nshards),
                &p,
                Some(s),
                "shard header",
            )?;
            shards.push(f);
            shard_paths.push(p);
        }
        let stride = match m.kind {
            Kind::Dense => m.dense_stride().unwrap_or(0),
            Kind::Ragged => 0,
        };
        let ddict = match m.codec {
            Codec::ZstdDict => Some(zstd::dict::DecoderDictionary::try_copy(&m.dict).map_err(
                |e| {
                    Error::corrupt(
                        Location {
                            path: mp.clone(),
                            ..Default::default()
                        },
                        "zstd dictionary",
                        "a dictionary zstd can load",
                        e.to_string(),
                    )
                },
            )?),
            _ => None,
        };
        let uuid_crc = format::uuid_crc(&m.uuid);
        let shard_map = format::ShardMap::new(m.block_records, m.shard_count());
        // Each shard's length was checked against its file above.
        let outgrows_memory = outgrows_memory(m.shards.iter().map(|s| s.len).sum());
        let mut inner = Inner {
            path: path.to_path_buf(),
            m,
            shard_paths,
            shards,
            index,
            index_path,
            entry,
            stride,
            ddict,
            verify: opts.verify,
            cold: opts.cold_reads,
            outgrows_memory,
            uuid_crc,
            shard_map,
            warm_gathers: std::sync::atomic::AtomicU32::new(0),
            fixed: None,
            closed: AtomicBool::new(false),
        };
        inner.validate_entries()?;
        inner.fixed = Fixed::build(&inner.m, inner.stride, |i| inner.entry(i).crc)?;
        // A small index is held in process memory: every gather reads one entry per record, so
        // a page of it that the kernel evicted (memory pressure, a store larger than memory)
        // would cost a device read per record before the record's own read. The open has just
        // read every entry, so the copy is one pass over bytes already cached.
        if inner.index.bytes().len() <= INDEX_IN_MEMORY_BYTES {
            inner.index = Arc::new(InMemory(inner.index.bytes().to_vec()));
        }
        Ok(inner)
    }

    /// Structural check of every index entry: records tile each shard exactly (so every shard byte
    /// is covered by some record checksum), sizes are within limits, flags are known.
    fn validate_entries(&self) -> Result<()> {
        let m = &self.m;
        let nshards = m.shard_count();
        let mut cursor = vec![HEADER_LEN as u64; nshards as usize];
        let isz = m.dtype.itemsize() as u64;
        for i in 0..m.records {
            let e = self.entry(i);
            let s = format::shard_of(i, m.block_records, nshards);
            let bad = |what: &str, expected: String, found: String| {
                Error::corrupt(
                    Location {
                        path: self.index_path.clone(),
                        record: Some(i),
                        offset: Some(format::entry_offset(i, self.entry) as u64),
                        ..Default::default()
                    },
                    what.to_string(),
                    expected,
                    found,
                )
            };
            if e.offset != cursor[s as usize] {
                return Err(bad(
                    "record offset in its shard",
                    cursor[s as usize].to_string(),
                    e.offset.to_string(),
                ));
            }
            if e.flags & !FLAG_STORED_RAW != 0 {
                return Err(bad("entry flags", "0 or 1".into(), e.flags.to_string()));
            }
            let raw_len = match m.kind {
                Kind::Dense => self.stride,
                Kind::Ragged => {
                    let shape = self.shape_words(i);
                    let mut count: u64 = 1;
                    for d in shape {
                        count = count.checked_mul(d).ok_or_else(|| {
                            bad("record shape", "no overflow".into(), "overflow".into())
                        })?;
                    }
                    if count == 0 {
                        return Err(bad("record element count", "> 0".into(), "0".into()));
                    }
                    count
                        .checked_mul(isz)
                        .filter(|&b| b <= MAX_RECORD_BYTES)
                        .ok_or_else(|| bad("record size", "<= 2 GiB".into(), "larger".into()))?
                }
            };
            let raw_flag = e.flags & FLAG_STORED_RAW != 0;
            if m.codec == Codec::Raw && !raw_flag {
                return Err(bad(
                    "entry flags for a raw container",
                    "1".into(),
                    e.flags.to_string(),
                ));
            }
            if raw_flag && u64::from(e.stored_len) != raw_len {
                return Err(bad(
                    "stored length of an uncompressed record",
                    raw_len.to_string(),
                    e.stored_len.to_string(),
                ));
            }
            if !raw_flag && (e.stored_len == 0 || u64::from(e.stored_len) >= raw_len) {
                return Err(bad(
                    "compressed length",
                    format!("1..{raw_len}"),
                    e.stored_len.to_string(),
                ));
            }
            cursor[s as usize] += u64::from(e.stored_len);
        }
        for (s, c) in cursor.iter().enumerate() {
            if *c != m.shards[s].len {
                return Err(Error::corrupt(
                    Location {
                        path: self.shard_paths[s].clone(),
                        shard: Some(s as u32),
                        ..Default::default()
                    },
                    "shard length covered by its records",
                    c,
                    m.shards[s].len,
                ));
            }
        }
        Ok(())
    }

    #[inline]
    fn entry(&self, i: u64) -> Entry {
        self.entry_in(self.index.bytes(), i)
    }

    #[inline]
    pub(super) fn shape_words(&self, i: u64) -> impl Iterator<Item = u64> + '_ {
        self.shape_words_in(self.index.bytes(), i)
    }

    /// Record `i`'s shape from an already fetched index slice.
    #[inline]
    pub(super) fn shape_words_in<'a>(
        &self,
        index: &'a [u8],
        i: u64,
    ) -> impl Iterator<Item = u64> + 'a {
        let off = format::entry_offset(i, self.entry) + 16;
        let b = &index[off..off + 8 * self.m.ndim as usize];
        b.chunks_exact(8).map(|c| format::rd_u64(c, 0))
    }

    pub(super) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed(format!("store {}", self.path.display())));
        }
        Ok(())
    }

    pub(super) fn check_indices(&self, idx: &[u64]) -> Result<()> {
        let len = self.m.records;
        if let Some(&bad) = idx.iter().find(|&&i| i >= len) {
            return Err(Error::IndexOutOfRange { index: bad, len });
        }
        Ok(())
    }

    pub(super) fn raw_len(&self, i: u64) -> u64 {
        match self.m.kind {
            Kind::Dense => self.stride,
            Kind::Ragged => self.shape_words(i).product::<u64>() * self.m.dtype.itemsize() as u64,
        }
    }

    pub(super) fn loc(&self, i: u64, s: u32, offset: u64) -> Location {
        Location {
            path: self.shard_paths[s as usize].clone(),
            shard: Some(s),
            record: Some(i),
            offset: Some(offset),
        }
    }

    /// Whether the index is a copy in process memory (always resident), as every index of up to
    /// [`INDEX_IN_MEMORY_BYTES`] is made at open.
    pub(super) fn index_in_memory(&self) -> bool {
        self.index.bytes().len() <= INDEX_IN_MEMORY_BYTES
    }

    #[inline]
    pub(super) fn entry_in(&self, index: &[u8], i: u64) -> Entry {
        let off = format::entry_offset(i, self.entry);
        format::decode_entry(&index[off..off + 16])
    }

    pub(super) fn disk_bytes(&self) -> u64 {
        let mut total = 0;
        for p in self
            .shard_paths
            .iter()
            .chain([&self.index_path, &self.path.join(MANIFEST_FILE)])
        {
            if let Ok(md) = std::fs::metadata(p) {
                use std::os::unix::fs::MetadataExt;
                total += md.blocks() * 512;
            }
        }
        total
    }
}

/// A file the manifest lists but the directory lacks is a damaged container, not an I/O failure.
fn missing_or_io(path: &Path, shard: Option<u32>, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        Error::corrupt(
            Location {
                path: path.to_path_buf(),
                shard,
                ..Default::default()
            },
            "file listed in the manifest",
            "present",
            "missing",
        )
    } else {
        Error::io("open", path, e)
    }
}

/// Paths of the files inside a container (for tools and tests).
pub fn container_files(path: impl AsRef<Path>) -> Result<Vec<PathBuf>> {
    let p = path.as_ref();
    let mp = p.join(MANIFEST_FILE);
    let bytes = std::fs::read(&mp).map_err(|e| Error::io("read", &mp, e))?;
    let m = Manifest::decode(&bytes, &mp)?;
    let mut v = vec![mp, p.join(INDEX_FILE)];
    for s in 0..m.shard_count() {
        v.push(p.join(format::shard_file_name(s)));
    }
    Ok(v)
}
