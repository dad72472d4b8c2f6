//! Reading: open and validate a container, bind it to an allocator, gather batches.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;

use crate::alloc::{Allocation, Allocator};
use crate::dtype::DType;
use crate::error::{Error, Location, Result};
use crate::format::{
    self, Codec, Entry, FLAG_STORED_RAW, HEADER_LEN, INDEX_FILE, Kind, MANIFEST_FILE,
    MAX_RECORD_BYTES, Manifest,
};
use crate::vfs::{ReadFile, StdFs, Vfs};

/// Alignment of every output region and of each field inside a Ragged region.
pub const OUTPUT_ALIGN: usize = 64;
/// Batches smaller than this are gathered on the calling thread; larger ones are split over rayon.
const PARALLEL_BYTES: usize = 1 << 20;
/// Copy-then-checksum granularity: each piece is checksummed while it is still in L1/L2.
const VERIFY_CHUNK: usize = 32 << 10;
/// How many records ahead a gather prefetches record bytes (index entries: twice as far).
const PREFETCH_AHEAD: usize = 8;
/// Prefetch at most this many leading bytes of a record (the hardware prefetcher streams the rest).
const PREFETCH_BYTES: usize = 512;

/// How to open a store.
#[derive(Clone)]
pub struct OpenOptions {
    /// Verify each record's CRC32C on every read (default `true`).
    pub verify: bool,
    /// File system to read through.
    pub vfs: Arc<dyn Vfs>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            verify: true,
            vfs: Arc::new(StdFs),
        }
    }
}

impl fmt::Debug for OpenOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenOptions")
            .field("verify", &self.verify)
            .finish()
    }
}

struct Inner {
    path: PathBuf,
    m: Manifest,
    shard_paths: Vec<PathBuf>,
    shards: Vec<Arc<dyn ReadFile>>,
    index: Arc<dyn ReadFile>,
    index_path: PathBuf,
    entry: usize,
    stride: u64,
    ddict: Option<zstd::dict::DecoderDictionary<'static>>,
    verify: bool,
    /// CRC32C of the container id, the common prefix of every record's checksum seed.
    uuid_crc: u32,
    /// Record → shard, precomputed from the manifest.
    shard_map: format::ShardMap,
    closed: AtomicBool,
}

impl Inner {
    fn open(path: &Path, kind: Kind, opts: &OpenOptions) -> Result<Inner> {
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
        let inner = Inner {
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
            uuid_crc,
            shard_map,
            closed: AtomicBool::new(false),
        };
        inner.validate_entries()?;
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
    fn shape_words(&self, i: u64) -> impl Iterator<Item = u64> + '_ {
        self.shape_words_in(self.index.bytes(), i)
    }

    /// Record `i`'s shape from an already fetched index slice.
    #[inline]
    fn shape_words_in<'a>(&self, index: &'a [u8], i: u64) -> impl Iterator<Item = u64> + 'a {
        let off = format::entry_offset(i, self.entry) + 16;
        let b = &index[off..off + 8 * self.m.ndim as usize];
        b.chunks_exact(8).map(|c| format::rd_u64(c, 0))
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed(format!("store {}", self.path.display())));
        }
        Ok(())
    }

    fn check_indices(&self, idx: &[u64]) -> Result<()> {
        let len = self.m.records;
        if let Some(&bad) = idx.iter().find(|&&i| i >= len) {
            return Err(Error::IndexOutOfRange { index: bad, len });
        }
        Ok(())
    }

    fn raw_len(&self, i: u64) -> u64 {
        match self.m.kind {
            Kind::Dense => self.stride,
            Kind::Ragged => self.shape_words(i).product::<u64>() * self.m.dtype.itemsize() as u64,
        }
    }

    fn loc(&self, i: u64, s: u32, offset: u64) -> Location {
        Location {
            path: self.shard_paths[s as usize].clone(),
            shard: Some(s),
            record: Some(i),
            offset: Some(offset),
        }
    }

    /// The mapped index and shard bytes, fetched once for a run of records so that the per-record
    /// path makes no virtual calls.
    fn maps(&self) -> Maps<'_> {
        Maps {
            index: self.index.bytes(),
            shards: self.shards.iter().map(|f| f.bytes()).collect(),
        }
    }

    #[inline]
    fn entry_in(&self, index: &[u8], i: u64) -> Entry {
        let off = format::entry_offset(i, self.entry);
        format::decode_entry(&index[off..off + 16])
    }

    /// Record `i`'s shard, index entry and stored bytes.
    #[inline]
    fn locate<'a>(&self, maps: &Maps<'a>, i: u64) -> (u32, Entry, &'a [u8]) {
        let s = self.shard_map.shard_of(i);
        let e = self.entry_in(maps.index, i);
        let shard = maps.shards[s as usize];
        (
            s,
            e,
            &shard[e.offset as usize..e.offset as usize + e.stored_len as usize],
        )
    }

    /// Starts loading the index entry of record `i` into cache.
    #[inline]
    fn prefetch_entry(&self, index: &[u8], i: u64) {
        let off = format::entry_offset(i, self.entry);
        if let Some(b) = index.get(off..off + 1) {
            prefetch(b);
        }
    }

    /// Starts loading the first [`PREFETCH_BYTES`] of record `i`'s stored bytes into cache.
    #[inline]
    fn prefetch_record(&self, maps: &Maps<'_>, i: u64) {
        let s = self.shard_map.shard_of(i);
        let e = self.entry_in(maps.index, i);
        let start = e.offset as usize;
        let end = start.saturating_add((e.stored_len as usize).min(PREFETCH_BYTES));
        if let Some(b) = maps.shards[s as usize].get(start..end) {
            prefetch(b);
        }
    }

    /// Reads records `idx` one after another; record k goes to `out[offsets(k)..offsets(k + 1)]`
    /// relative to `base`. Index entries and record bytes are prefetched a few records ahead, so
    /// the memory latency of the next records overlaps the copy and checksum of this one.
    fn read_run<F: Fn(usize) -> usize>(
        &self,
        idx: &[u64],
        out: &mut [u8],
        base: usize,
        offsets: &F,
        first: usize,
        dec: &mut Decoder<'_>,
    ) -> Result<()> {
        let maps = self.maps();
        let mut start = offsets(first) - base;
        for (j, &i) in idx.iter().enumerate() {
            if let Some(&ahead) = idx.get(j + 2 * PREFETCH_AHEAD) {
                self.prefetch_entry(maps.index, ahead);
            }
            if let Some(&ahead) = idx.get(j + PREFETCH_AHEAD) {
                self.prefetch_record(&maps, ahead);
            }
            let end = offsets(first + j + 1) - base;
            self.read_record(&maps, i, &mut out[start..end], dec, self.verify)?;
            start = end;
        }
        Ok(())
    }

    /// Decodes record `i` into `dst` (exactly its raw size), verifying as configured.
    fn read_record(
        &self,
        maps: &Maps<'_>,
        i: u64,
        dst: &mut [u8],
        dec: &mut Decoder<'_>,
        verify: bool,
    ) -> Result<()> {
        let (s, e, stored) = self.locate(maps, i);
        if e.flags & FLAG_STORED_RAW != 0 {
            if verify {
                copy_verified(
                    dst,
                    stored,
                    format::record_seed_after(self.uuid_crc, i),
                    e.crc,
                )
                .map_err(|(exp, got)| self.crc_error(i, s, e.offset, exp, got))?;
            } else {
                dst.copy_from_slice(stored);
            }
            return Ok(());
        }
        if verify {
            let got = crate::crc::append(format::record_seed_after(self.uuid_crc, i), stored);
            if got != e.crc {
                return Err(self.crc_error(i, s, e.offset, e.crc, got));
            }
        }
        let n = dec.decompress(stored, dst).map_err(|err| {
            Error::corrupt(
                self.loc(i, s, e.offset),
                "zstd frame",
                "a valid frame",
                err.to_string(),
            )
        })?;
        if n != dst.len() {
            return Err(Error::corrupt(
                self.loc(i, s, e.offset),
                "decompressed record size",
                dst.len(),
                n,
            ));
        }
        Ok(())
    }

    /// For a compressed record: the size its zstd frame header declares must be the size the
    /// index declares, checked before anything is allocated or decoded for it (a hostile index
    /// could otherwise make `verify()` allocate up to the 2 GiB record limit per record).
    fn check_frame_size(&self, maps: &Maps<'_>, i: u64, raw_len: u64) -> Result<()> {
        let (s, e, stored) = self.locate(maps, i);
        if e.flags & FLAG_STORED_RAW != 0 {
            return Ok(());
        }
        match zstd::zstd_safe::get_frame_content_size(stored) {
            Ok(Some(n)) if n == raw_len => Ok(()),
            // A frame without a size (not written by zrecord) is checked by decoding.
            Ok(None) => Ok(()),
            Ok(Some(n)) => Err(Error::corrupt(
                self.loc(i, s, e.offset),
                "zstd frame content size",
                raw_len,
                n,
            )),
            Err(_) => Err(Error::corrupt(
                self.loc(i, s, e.offset),
                "zstd frame header",
                "a valid frame header",
                "unreadable",
            )),
        }
    }

    fn crc_error(&self, i: u64, s: u32, off: u64, expected: u32, found: u32) -> Error {
        Error::corrupt(
            self.loc(i, s, off),
            "record crc32c",
            format!("{expected:#010x}"),
            format!("{found:#010x}"),
        )
    }

    fn decoder(&self) -> Result<Decoder<'_>> {
        Ok(match self.m.codec {
            Codec::Raw => Decoder::None,
            Codec::Zstd | Codec::ZstdDict => Decoder::Zstd(self.ddict.as_ref()),
        })
    }

    /// Fills `out` with the records `idx`, where record k goes to `out[offsets[k]..offsets[k+1]]`.
    fn fill<F: Fn(usize) -> usize + Sync>(
        &self,
        idx: &[u64],
        out: &mut [u8],
        offsets: &F,
    ) -> Result<()> {
        let total = out.len();
        let compressed = self.m.codec != Codec::Raw;
        if idx.is_empty() {
            return Ok(());
        }
        if (total < PARALLEL_BYTES && !compressed)
            || idx.len() == 1
            || rayon::current_num_threads() == 1
            || SEQUENTIAL.get()
        {
            let mut dec = self.decoder()?;
            return self.read_run(idx, out, 0, offsets, 0, &mut dec);
        }
        FAN_OUTS.set(FAN_OUTS.get().wrapping_add(1));
        // Split the output into contiguous pieces of roughly equal bytes, one task per piece. A pool
        // may have more threads than cores (a loader's workers are pool threads too); pieces beyond
        // four per core add splitting, not parallelism.
        let threads = rayon::current_num_threads().min(cores());
        let pieces = (threads * 4).min(idx.len());
        let target = total.div_ceil(pieces).max(1);
        let mut bounds = vec![0usize];
        let mut next = target;
        for k in 1..idx.len() {
            if offsets(k) >= next {
                bounds.push(k);
                next = offsets(k) + target;
            }
        }
        bounds.push(idx.len());
        let mut slices: Vec<(usize, usize, &mut [u8])> = Vec::with_capacity(bounds.len());
        let mut rest = out;
        let mut consumed = 0;
        for w in bounds.windows(2) {
            let (a, b) = (w[0], w[1]);
            let end = offsets(b);
            let (head, tail) = rest.split_at_mut(end - consumed);
            slices.push((a, b, head));
            rest = tail;
            consumed = end;
        }
        slices
            .into_par_iter()
            .try_for_each(|(a, b, buf)| -> Result<()> {
                let mut dec = self.decoder()?;
                self.read_run(&idx[a..b], buf, offsets(a), offsets, a, &mut dec)
            })
    }

    fn verify_all(&self) -> Result<()> {
        let m = &self.m;
        let maps = self.maps();
        for (s, f) in self.shards.iter().enumerate() {
            let crc = crate::crc::append(0, f.bytes());
            if crc != m.shards[s].crc {
                // Locate the damaged record for a precise report, then fall back to the file.
                let mut dec = self.decoder()?;
                let mut buf = Vec::new();
                for i in (0..m.records).filter(|&i| self.shard_map.shard_of(i) == s as u32) {
                    let raw_len = self.raw_len(i);
                    self.check_frame_size(&maps, i, raw_len)?;
                    buf.resize(raw_len as usize, 0);
                    self.read_record(&maps, i, &mut buf, &mut dec, true)?;
                }
                return Err(Error::corrupt(
                    Location {
                        path: self.shard_paths[s].clone(),
                        shard: Some(s as u32),
                        ..Default::default()
                    },
                    "shard file crc32c",
                    format!("{:#010x}", m.shards[s].crc),
                    format!("{crc:#010x}"),
                ));
            }
        }
        // Every record decodes to its declared size (catches compressed frames that lie).
        let ids: Vec<u64> = (0..m.records).collect();
        ids.par_chunks(1024).try_for_each(|chunk| -> Result<()> {
            let mut dec = self.decoder()?;
            let mut buf = Vec::new();
            for &i in chunk {
                let raw_len = self.raw_len(i);
                self.check_frame_size(&maps, i, raw_len)?;
                buf.resize(raw_len as usize, 0);
                self.read_record(&maps, i, &mut buf, &mut dec, true)?;
            }
            Ok(())
        })
    }

    fn disk_bytes(&self) -> u64 {
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

enum Decoder<'a> {
    None,
    Zstd(Option<&'a zstd::dict::DecoderDictionary<'static>>),
}

thread_local! {
    /// One reusable zstd decompression context per thread. Creating a context costs ~17 us and its
    /// first frame another ~20 us of table set-up: ten times the decode of a 2 KiB record.
    static DCTX: std::cell::RefCell<Option<zstd::zstd_safe::DCtx<'static>>> =
        const { std::cell::RefCell::new(None) };
}

fn zstd_decode(
    ctx: &mut zstd::zstd_safe::DCtx<'static>,
    dict: Option<&zstd::dict::DecoderDictionary<'static>>,
    src: &[u8],
    dst: &mut [u8],
) -> std::io::Result<usize> {
    let r = match dict {
        Some(d) => ctx.decompress_using_ddict(dst, src, d.as_ddict()),
        None => ctx.decompress(dst, src),
    };
    r.map_err(|code| std::io::Error::other(zstd::zstd_safe::get_error_name(code)))
}

impl Decoder<'_> {
    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Decoder::None => Err(std::io::Error::other(
                "record flagged compressed in a raw container",
            )),
            Decoder::Zstd(dict) => DCTX.with(|cell| match cell.try_borrow_mut() {
                Ok(mut slot) => {
                    if slot.is_none() {
                        *slot = zstd::zstd_safe::DCtx::try_create();
                    }
                    match slot.as_mut() {
                        Some(ctx) => zstd_decode(ctx, *dict, src, dst),
                        None => Err(std::io::Error::other("cannot allocate a zstd context")),
                    }
                }
                // Re-entered on this thread (cannot happen today): use a private context.
                Err(_) => match zstd::zstd_safe::DCtx::try_create() {
                    Some(mut ctx) => zstd_decode(&mut ctx, *dict, src, dst),
                    None => Err(std::io::Error::other("cannot allocate a zstd context")),
                },
            }),
        }
    }
}

thread_local! {
    static SEQUENTIAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static FAN_OUTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many gathers made on the calling thread so far were split across the rayon pool (a
/// wrapping count; compare two readings). A loader uses it to tell whether its gathers keep every
/// core busy.
pub fn gather_fan_outs() -> u64 {
    FAN_OUTS.get()
}

/// Runs `f` with every gather it makes on the calling thread done on that thread alone, instead of
/// being split across the rayon pool (what a gather of 1 MiB or more, or of compressed records,
/// otherwise does). For callers that already run one gather per thread, e.g. loader workers: there
/// the parallelism is across batches, and fanning each batch out again only adds contention.
pub fn sequential_gathers<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SEQUENTIAL.set(self.0);
        }
    }
    let _restore = Restore(SEQUENTIAL.replace(true));
    f()
}

/// The machine's available parallelism, read once.
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// A store's mapped bytes for one run of records.
struct Maps<'a> {
    index: &'a [u8],
    shards: Vec<&'a [u8]>,
}

/// Hints the CPU to load `bytes` into cache; no architectural effect.
#[inline(always)]
fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for off in (0..bytes.len()).step_by(64) {
        // SAFETY: a prefetch never faults or changes memory; the address is inside `bytes`.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                bytes.as_ptr().add(off).cast::<i8>(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// Copies `src` into `dst` and checks the CRC of what was stored to `dst` (so what the caller gets
/// is exactly what was verified): in one pass where the CPU allows (see `crc::copy_append`),
/// else piece by piece while each piece is hot in cache.
#[inline]
fn copy_verified(
    dst: &mut [u8],
    src: &[u8],
    seed: u32,
    expected: u32,
) -> std::result::Result<(), (u32, u32)> {
    let mut crc = seed;
    for (d, s) in dst.chunks_mut(VERIFY_CHUNK).zip(src.chunks(VERIFY_CHUNK)) {
        crc = crate::crc::copy_append(crc, d, s);
    }
    if crc == expected {
        Ok(())
    } else {
        Err((expected, crc))
    }
}

macro_rules! store_common {
    ($store:ident, $view:ident, $kind:expr, $kname:literal) => {
        impl $store {
            /// Opens and validates a published container (structure, manifest, index and header
            /// checksums). Record payloads are verified when read.
            pub fn open(path: impl AsRef<Path>) -> Result<Self> {
                Self::open_with(path, OpenOptions::default())
            }

            /// Opens with explicit options.
            pub fn open_with(path: impl AsRef<Path>, opts: OpenOptions) -> Result<Self> {
                Ok($store {
                    inner: Arc::new(Inner::open(path.as_ref(), $kind, &opts)?),
                })
            }

            /// Number of records.
            pub fn len(&self) -> u64 {
                self.inner.m.records
            }

            /// True when the store holds no records.
            pub fn is_empty(&self) -> bool {
                self.inner.m.records == 0
            }

            /// Element type.
            pub fn dtype(&self) -> DType {
                self.inner.m.dtype
            }

            /// Codec the records were written with.
            pub fn codec(&self) -> Codec {
                self.inner.m.codec
            }

            /// Number of data shards.
            pub fn data_shards(&self) -> u32 {
                self.inner.m.shard_count()
            }

            /// Container directory.
            pub fn path(&self) -> &Path {
                &self.inner.path
            }

            /// The dictionary stored in a `zstd_dict` container.
            pub fn dictionary(&self) -> Option<&[u8]> {
                (!self.inner.m.dict.is_empty()).then_some(&self.inner.m.dict[..])
            }

            /// Allocated bytes on disk (all files).
            pub fn disk_bytes(&self) -> u64 {
                self.inner.disk_bytes()
            }

            /// Reads and checks every byte: whole-shard checksums, every record's checksum, every
            /// compressed record's decoded size.
            pub fn verify(&self) -> Result<()> {
                self.inner.check_open()?;
                self.inner.verify_all()
            }

            /// Binds the store to a placement. The view gathers into memory from `allocator`.
            pub fn bind(&self, allocator: Arc<dyn Allocator>) -> $view {
                let alloc = allocator.bind_view().unwrap_or(allocator);
                $view {
                    inner: self.inner.clone(),
                    alloc,
                }
            }

            /// Releases the store: every view bound to it fails with [`Error::Closed`] afterwards.
            /// Batches already gathered stay valid (they own their memory).
            pub fn close(&self) {
                self.inner.closed.store(true, Ordering::Release);
            }

            /// Whether [`close`](Self::close) was called.
            pub fn is_closed(&self) -> bool {
                self.inner.closed.load(Ordering::Acquire)
            }
        }

        impl fmt::Debug for $store {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($store))
                    .field("path", &self.inner.path)
                    .field("records", &self.inner.m.records)
                    .field("dtype", &self.inner.m.dtype)
                    .field("codec", &self.inner.m.codec)
                    .finish()
            }
        }

        impl $view {
            /// Number of records.
            pub fn len(&self) -> u64 {
                self.inner.m.records
            }

            /// True when the store holds no records.
            pub fn is_empty(&self) -> bool {
                self.inner.m.records == 0
            }

            /// Element type.
            pub fn dtype(&self) -> DType {
                self.inner.m.dtype
            }

            /// Codec.
            pub fn codec(&self) -> Codec {
                self.inner.m.codec
            }

            /// The allocator (view handle) batches come from.
            pub fn allocator(&self) -> &Arc<dyn Allocator> {
                &self.alloc
            }

            /// The dictionary of a `zstd_dict` store.
            pub fn dictionary(&self) -> Option<&[u8]> {
                (!self.inner.m.dict.is_empty()).then_some(&self.inner.m.dict[..])
            }

            /// Whether the underlying store has been closed.
            pub fn is_closed(&self) -> bool {
                self.inner.closed.load(Ordering::Acquire)
            }

            /// Gathers the records `range.start..range.end` in order.
            pub fn range(&self, range: Range<u64>) -> Result<<Self as ViewGather>::Batch> {
                if range.start > range.end || range.end > self.len() {
                    return Err(Error::IndexOutOfRange {
                        index: range.end.max(range.start),
                        len: self.len(),
                    });
                }
                let idx: Vec<u64> = range.collect();
                self.gather(&idx)
            }
        }

        impl fmt::Debug for $view {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($view))
                    .field("path", &self.inner.path)
                    .field("records", &self.inner.m.records)
                    .field("device", &self.alloc.device())
                    .finish()
            }
        }
    };
}

/// Batch type of a view (used by generic code such as the loader).
pub trait ViewGather {
    /// What a gather returns.
    type Batch;
    /// Gathers `idx` in order.
    fn gather(&self, idx: &[u64]) -> Result<Self::Batch>;
}

/// An opened Dense container. Bind it to an allocator to read.
#[derive(Clone)]
pub struct DenseStore {
    inner: Arc<Inner>,
}

/// A Dense store bound to a placement.
#[derive(Clone)]
pub struct DenseView {
    inner: Arc<Inner>,
    alloc: Arc<dyn Allocator>,
}

store_common!(DenseStore, DenseView, Kind::Dense, "Dense");

impl DenseStore {
    /// Shape of one record.
    pub fn item_shape(&self) -> &[u64] {
        &self.inner.m.item_shape
    }

    /// Bytes per record.
    pub fn record_bytes(&self) -> u64 {
        self.inner.stride
    }
}

impl DenseView {
    /// Shape of one record.
    pub fn item_shape(&self) -> &[u64] {
        &self.inner.m.item_shape
    }

    /// Bytes per record.
    pub fn record_bytes(&self) -> u64 {
        self.inner.stride
    }

    /// One record, without a batch axis.
    pub fn get(&self, i: u64) -> Result<DenseBatch> {
        let mut b = self.gather(&[i])?;
        b.shape.remove(0);
        Ok(b)
    }

    /// One record per step, in order.
    pub fn iter(&self) -> impl Iterator<Item = Result<DenseBatch>> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }

    /// Gathers `idx` (any order, duplicates allowed) into one contiguous `(n, *item_shape)` batch.
    pub fn gather(&self, idx: &[u64]) -> Result<DenseBatch> {
        <Self as ViewGather>::gather(self, idx)
    }
}

impl ViewGather for DenseView {
    type Batch = DenseBatch;

    fn gather(&self, idx: &[u64]) -> Result<DenseBatch> {
        let inner = &*self.inner;
        inner.check_open()?;
        inner.check_indices(idx)?;
        let stride = inner.stride as usize;
        let bytes = idx.len().checked_mul(stride).ok_or_else(|| {
            Error::LimitExceeded(format!("{} records of {stride} bytes", idx.len()))
        })?;
        let mut alloc = self.alloc.acquire(bytes, OUTPUT_ALIGN)?;
        let out = alloc.host_slice_mut_or_err()?;
        inner.fill(idx, out, &|k| k * stride)?;
        let mut shape = Vec::with_capacity(1 + inner.m.item_shape.len());
        shape.push(idx.len() as u64);
        shape.extend_from_slice(&inner.m.item_shape);
        Ok(DenseBatch {
            alloc,
            shape,
            dtype: inner.m.dtype,
        })
    }
}

/// A gathered Dense batch, in memory from the view's allocator.
pub struct DenseBatch {
    alloc: Allocation,
    shape: Vec<u64>,
    dtype: DType,
}

impl DenseBatch {
    /// The records, back to back, C order.
    pub fn bytes(&self) -> &[u8] {
        self.alloc.host_slice().unwrap_or(&[])
    }

    /// `(n, *item_shape)` for a gather, `item_shape` for a single `get`.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The memory backing the batch.
    pub fn allocation(&self) -> &Allocation {
        &self.alloc
    }

    /// Splits into the allocation and the shape.
    pub fn into_parts(self) -> (Allocation, Vec<u64>, DType) {
        (self.alloc, self.shape, self.dtype)
    }
}

impl fmt::Debug for DenseBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DenseBatch")
            .field("shape", &self.shape)
            .field("dtype", &self.dtype)
            .finish()
    }
}

/// An opened Ragged container. Bind it to an allocator to read.
#[derive(Clone)]
pub struct RaggedStore {
    inner: Arc<Inner>,
}

/// A Ragged store bound to a placement.
#[derive(Clone)]
pub struct RaggedView {
    inner: Arc<Inner>,
    alloc: Arc<dyn Allocator>,
}

store_common!(RaggedStore, RaggedView, Kind::Ragged, "Ragged");

impl RaggedStore {
    /// Rank of every record.
    pub fn ndim(&self) -> u32 {
        self.inner.m.ndim
    }

    /// Shape of record `i`.
    pub fn shape_of(&self, i: u64) -> Result<Vec<u64>> {
        self.inner.check_indices(&[i])?;
        Ok(self.inner.shape_words(i).collect())
    }
}

impl RaggedView {
    /// Rank of every record.
    pub fn ndim(&self) -> u32 {
        self.inner.m.ndim
    }

    /// Shape of record `i` (from the index, no payload read).
    pub fn shape_of(&self, i: u64) -> Result<Vec<u64>> {
        self.inner.check_indices(&[i])?;
        Ok(self.inner.shape_words(i).collect())
    }

    /// One record as a one-record batch.
    pub fn get(&self, i: u64) -> Result<RaggedBatch> {
        self.gather(&[i])
    }

    /// One record per step, in order.
    pub fn iter(&self) -> impl Iterator<Item = Result<RaggedBatch>> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }

    /// Gathers `idx` into one packed batch: values, `cu_seqlens` (int32, n+1) and shapes
    /// (u64, n x ndim), all in one allocation sized exactly before any copy.
    pub fn gather(&self, idx: &[u64]) -> Result<RaggedBatch> {
        <Self as ViewGather>::gather(self, idx)
    }
}

impl ViewGather for RaggedView {
    type Batch = RaggedBatch;

    fn gather(&self, idx: &[u64]) -> Result<RaggedBatch> {
        let inner = &*self.inner;
        inner.check_open()?;
        inner.check_indices(idx)?;
        let n = idx.len();
        let ndim = inner.m.ndim as usize;
        let isz = inner.m.dtype.itemsize();
        // Pass 1: element counts, offsets and shapes from the index (no payload touched).
        let index = inner.index.bytes();
        let mut cu: Vec<i32> = Vec::with_capacity(n + 1);
        let mut dims: Vec<u64> = Vec::with_capacity(n * ndim);
        cu.push(0);
        let mut total: u64 = 0;
        for (k, &i) in idx.iter().enumerate() {
            if let Some(&ahead) = idx.get(k + 2 * PREFETCH_AHEAD) {
                inner.prefetch_entry(index, ahead);
            }
            let mut count = 1u64;
            for d in inner.shape_words_in(index, i) {
                dims.push(d);
                count *= d;
            }
            total += count;
            if total > i32::MAX as u64 {
                return Err(Error::LimitExceeded(format!(
                    "a ragged batch holds at most {} values (int32 cu_seqlens); these {n} records hold more",
                    i32::MAX
                )));
            }
            cu.push(total as i32);
        }
        let values_len = total as usize * isz;
        let cu_off = values_len.next_multiple_of(OUTPUT_ALIGN);
        let shapes_off = (cu_off + 4 * (n + 1)).next_multiple_of(OUTPUT_ALIGN);
        let bytes = shapes_off + 8 * n * ndim;
        let mut alloc = self.alloc.acquire(bytes, OUTPUT_ALIGN)?;
        let out = alloc.host_slice_mut_or_err()?;
        {
            let (values, meta) = out.split_at_mut(cu_off);
            for (dst, c) in meta[..4 * (n + 1)].chunks_exact_mut(4).zip(&cu) {
                dst.copy_from_slice(&c.to_ne_bytes());
            }
            let shapes = &mut meta[shapes_off - cu_off..];
            for (dst, d) in shapes.chunks_exact_mut(8).zip(&dims) {
                dst.copy_from_slice(&d.to_ne_bytes());
            }
            inner.fill(idx, &mut values[..values_len], &|k| cu[k] as usize * isz)?;
        }
        Ok(RaggedBatch {
            alloc,
            n,
            ndim,
            dtype: inner.m.dtype,
            values_len,
            cu_off,
            shapes_off,
        })
    }
}

/// A gathered Ragged batch: one allocation holding `values | cu_seqlens | shapes`, each field
/// aligned to 64 bytes.
pub struct RaggedBatch {
    alloc: Allocation,
    n: usize,
    ndim: usize,
    dtype: DType,
    values_len: usize,
    cu_off: usize,
    shapes_off: usize,
}

impl RaggedBatch {
    /// Number of records.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True for an empty gather.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Rank of every record.
    pub fn ndim(&self) -> usize {
        self.ndim
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Packed values (bytes).
    pub fn values(&self) -> &[u8] {
        &self.alloc.host_slice().unwrap_or(&[])[..self.values_len]
    }

    /// Element offsets of each record, `n + 1` entries starting at 0.
    pub fn cu_seqlens(&self) -> &[i32] {
        let b =
            &self.alloc.host_slice().unwrap_or(&[])[self.cu_off..self.cu_off + 4 * (self.n + 1)];
        // SAFETY: the region is 64-byte aligned and cu_off is a multiple of 64, so the pointer is
        // aligned for i32; the length is exactly n + 1 i32 values written by gather; the slice
        // borrows `self`, which owns the allocation.
        unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<i32>(), self.n + 1) }
    }

    /// Shapes, `n * ndim` values in record order.
    pub fn shapes(&self) -> &[u64] {
        let b = &self.alloc.host_slice().unwrap_or(&[])
            [self.shapes_off..self.shapes_off + 8 * self.n * self.ndim];
        // SAFETY: as for cu_seqlens: 64-byte aligned offset inside an aligned region, exact length.
        unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<u64>(), self.n * self.ndim) }
    }

    /// Values of record `k` (bytes).
    pub fn record(&self, k: usize) -> &[u8] {
        let cu = self.cu_seqlens();
        let isz = self.dtype.itemsize();
        &self.values()[cu[k] as usize * isz..cu[k + 1] as usize * isz]
    }

    /// The memory backing the batch.
    pub fn allocation(&self) -> &Allocation {
        &self.alloc
    }

    /// Byte offsets of `(values, cu_seqlens, shapes)` inside the allocation.
    pub fn field_offsets(&self) -> (usize, usize, usize) {
        (0, self.cu_off, self.shapes_off)
    }

    /// Byte length of the values field.
    pub fn values_bytes(&self) -> usize {
        self.values_len
    }

    /// Takes the allocation.
    pub fn into_allocation(self) -> Allocation {
        self.alloc
    }
}

impl fmt::Debug for RaggedBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RaggedBatch")
            .field("records", &self.n)
            .field("ndim", &self.ndim)
            .field("dtype", &self.dtype)
            .finish()
    }
}

/// Trains a zstd dictionary of at most `max_bytes` from a sample of a store's records (up to 4,096
/// records spread evenly over the store, at most 100x `max_bytes` of sample data). Never called
/// automatically.
pub fn train_dict_from(records: &[Vec<u8>], max_bytes: usize) -> Result<Vec<u8>> {
    if records.is_empty() {
        return Err(Error::invalid(
            "cannot train a dictionary from zero records",
        ));
    }
    zstd::dict::from_samples(records, max_bytes)
        .map_err(|e| Error::invalid(format!("dictionary training failed: {e}")))
}

/// Default dictionary size for [`train_dict`].
pub const DEFAULT_DICT_BYTES: usize = 112_640;

/// Something whose records can feed dictionary training.
pub trait DictSample {
    /// Number of records.
    fn record_count(&self) -> u64;
    /// Raw bytes of record `i`.
    fn record_bytes(&self, i: u64) -> Result<Vec<u8>>;
}

impl DictSample for DenseView {
    fn record_count(&self) -> u64 {
        self.len()
    }

    fn record_bytes(&self, i: u64) -> Result<Vec<u8>> {
        Ok(self.gather(&[i])?.bytes().to_vec())
    }
}

impl DictSample for RaggedView {
    fn record_count(&self) -> u64 {
        self.len()
    }

    fn record_bytes(&self, i: u64) -> Result<Vec<u8>> {
        Ok(self.gather(&[i])?.values().to_vec())
    }
}

/// Trains a dictionary from an evenly spread sample of `view`'s records.
pub fn train_dict(view: &dyn DictSample, max_bytes: usize) -> Result<Vec<u8>> {
    let n = view.record_count();
    if n == 0 {
        return Err(Error::invalid(
            "cannot train a dictionary from an empty store",
        ));
    }
    let want = n.min(4096);
    let budget = max_bytes.saturating_mul(100);
    let mut samples = Vec::with_capacity(want as usize);
    let mut used = 0usize;
    for k in 0..want {
        let i = k * n / want;
        let mut r = view.record_bytes(i)?;
        // Very large records: train on a prefix (dictionaries help most with small records).
        r.truncate(128 << 10);
        used += r.len();
        samples.push(r);
        if used >= budget {
            break;
        }
    }
    train_dict_from(&samples, max_bytes)
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

#[cfg(test)]
mod tests {
    use super::{SEQUENTIAL, sequential_gathers};

    #[test]
    fn sequential_gathers_is_scoped_nests_and_survives_unwinding() {
        assert!(!SEQUENTIAL.get());
        let inner = sequential_gathers(|| {
            let nested = sequential_gathers(|| SEQUENTIAL.get());
            (nested, SEQUENTIAL.get())
        });
        assert_eq!(
            inner,
            (true, true),
            "on inside, still on after a nested scope"
        );
        assert!(!SEQUENTIAL.get(), "off again after the scope");
        let unwound = std::panic::catch_unwind(|| sequential_gathers(|| panic!("inside")));
        assert!(unwound.is_err());
        assert!(!SEQUENTIAL.get(), "restored when the closure unwinds");
        // Another thread is not affected.
        sequential_gathers(|| {
            let other = std::thread::spawn(|| SEQUENTIAL.get()).join().unwrap();
            assert!(!other);
        });
    }
}
