//! The node-local cache of remote stores (`RemoteOptions::cache_dir`, `cache_bytes`,
//! `cache_block`): fixed-size blocks of shard objects, kept as files on a local disk and shared
//! by every process and thread of the node that opens stores with the same `cache_dir`.
//!
//! * **Key**: `cache_dir/<container uuid>/<shard>/<block>.blk`, block `b` of a shard holding its
//!   bytes `b * block .. (b + 1) * block` (the last block shorter). A published container never
//!   changes and a republished prefix has a new uuid, so a block is never stale.
//! * **File**: a header (magic `ZRCB`, version, the block's byte length, the page size, one
//!   CRC32C per 4 KiB page, each seeded with the block's identity), then the bytes.
//! * **Hits**: an open store keeps the block files it hits mapped (at most [`MAPPED`], or 1/64 of the bound, under the
//!   process's `SIGBUS` guard), so a hit makes no system call; a block that cannot be mapped is
//!   read with `pread`. The maps are published as an immutable [`Snapshot`] that a gather takes
//!   once (one lock, one reference count) and then looks each record's block up in with neither
//!   (a lock and a count per record cost a 540-byte line a fifth of its hit, and the lock is
//!   what a loader's threads would queue on); mapping a block publishes a new snapshot. A
//!   checked hit ([`BlockCache::read`] with `check`) checks the pages that hold the bytes asked
//!   for (a small record: at most two pages, not a block). A store that checks every record
//!   against its own CRC32C reads unchecked ([`BlockCache::held`]: records
//!   are decoded straight from the map) and reads checked only when a record fails, which tells
//!   a damaged block (removed and fetched again) from a record stored damaged.
//! * **Fill**: a block is written to a temporary file in its directory and renamed into place, so
//!   a reader sees a whole block or none; two processes filling one block write the same bytes.
//! * **Damage**: a block whose header or page fails its check (a torn disk, a stray write) is
//!   removed and reported as a miss, so the caller fetches it again; [`CacheStats::corrupt`]
//!   counts them.
//! * **Bound**: a shared byte count (`cache_dir/.size`, read and written under an exclusive lock
//!   on `cache_dir/.lock`) grows with every fill; a fill that takes it past `cache_bytes` evicts
//!   the least recently used blocks (a hit refreshes its file's modification time when it is
//!   over a minute old: the order is kept to the minute) until the
//!   blocks hold at most 90 % of it, recounting from the directory so that counts lost by killed
//!   processes do not accumulate. Between evictions the files may exceed the bound by the blocks
//!   filled concurrently (at most the gathers in flight on the node). Each eviction adds one to
//!   a count beside the size (its second word); an open store reads it at most every 100 ms
//!   ([`RECHECK`]) at a gather's start and drops its maps of deleted blocks, so a block evicted
//!   while mapped keeps its disk space only until then (and while gathers that took the older
//!   snapshot run).
//!
//! Nothing here is needed for correctness: a cache that cannot be created, read or written is a
//! miss (the first such error of a process is kept in [`CacheStats::last_error`]), and the
//! records are checked against their own CRC32C after the cache as after the network.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::options::CacheStats;

/// The file's magic bytes.
const MAGIC: &[u8; 4] = b"ZRCB";
/// The file format's version.
const VERSION: u32 = 1;
/// Bytes per checked page.
pub(crate) const PAGE: usize = 4096;
/// The fixed part of the header: magic, version, block length, page size.
const FIXED: usize = 16;
/// A hit refreshes its block's modification time (its place in the eviction order) only when
/// that time is older than this.
const TOUCH_AFTER: Duration = Duration::from_secs(60);

/// One node-local cache directory.
#[derive(Debug)]
pub(crate) struct BlockCache {
    dir: PathBuf,
    bound: u64,
    block: u64,
    hits: AtomicU64,
    misses: AtomicU64,
    fills: AtomicU64,
    corrupt: AtomicU64,
    evicted: AtomicU64,
    error: Mutex<Option<String>>,
    /// The block files this store keeps mapped for hits (at most [`MAPPED`]), as the snapshot
    /// gathers take ([`BlockCache::held`]); replaced whole, never changed in place.
    mapped: Mutex<Arc<Maps<Arc<Mapped>>>>,
    /// `cache_dir/.size`, whose second word counts the evictions of every process: read (at most
    /// every [`RECHECK`]) to drop the maps of evicted blocks, which would keep their disk space.
    size: File,
    /// The eviction count last seen.
    seen_evictions: AtomicU64,
    /// When the eviction count is next read, in milliseconds after `born`.
    next_check: AtomicU64,
    born: std::time::Instant,
    recheck: Duration,
    /// Blocks this store maps at most: [`MAPPED`], or fewer for a small cache
    /// ([`MAPPED_SHARE`]).
    max_maps: usize,
}

mod bound;
use bound::RECHECK;
mod held;
mod key;
use held::Mapped;
pub(crate) use held::{Held, Snapshot};
use key::{Key, Maps};

/// Block files one open store keeps mapped, at most: 1 GiB of address space at the default
/// 256 KiB blocks. (A cache holding a 376 MB store, 1,436 blocks, hits it all in maps; at 512, a
/// gather of it dropped and remade maps every batch and read 0.46x the local gather.) Each holds
/// one of the process's `SIGBUS` guard slots (`crate::sigbus::SLOTS`) and its file's inode: a
/// block another process evicts meanwhile stays readable (its bytes never change) and takes its
/// disk space until it is dropped from here. Past the bound, half the maps are dropped from the
/// store's snapshot; a map dropped so stays mapped until the gathers that took an earlier
/// snapshot end (at most one snapshot per gather in flight).
const MAPPED: usize = 4096;

/// A store maps at most this fraction of the cache's bound (and at most [`MAPPED`] blocks, at
/// least one): a map of a block that another process evicts keeps the block's disk space until
/// the store drops it, so `P` processes reading one cache may hold up to `P / 64` of the bound
/// beyond it (a small cache's blocks are read with `pread` instead).
const MAPPED_SHARE: u64 = 64;

/// What looking a block file up for a hit found.
enum Found {
    Mapped(Arc<Mapped>),
    /// The file is not there.
    Missing,
    /// The file is there but fails its header or length check.
    Damaged,
    /// The file, open, could not be mapped (no guard slot left, or an error): read it with
    /// `pread`.
    Unmapped(File),
}

/// Seconds since the epoch (the clock [`BlockCache::touch`] takes).
pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The header's length for a block of `len` bytes.
fn header_len(len: usize) -> usize {
    FIXED + 4 * len.div_ceil(PAGE)
}

/// The CRC32C seed of block `b` of shard `shard` of container `uuid`: a block copied to another
/// key fails its check.
fn block_seed(uuid: &[u8; 16], shard: u32, b: u64) -> u32 {
    let mut id = [0u8; 28];
    id[..16].copy_from_slice(uuid);
    id[16..20].copy_from_slice(&shard.to_le_bytes());
    id[20..28].copy_from_slice(&b.to_le_bytes());
    crc32c::crc32c(&id)
}

/// Fills `buf` from byte `at` of `f`: `Ok(false)` when the file ends first (a torn block).
fn read_whole(f: &File, buf: &mut [u8], at: u64) -> io::Result<bool> {
    match f.read_exact_at(buf, at) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// The little-endian word at byte `at` of `bytes`.
fn word(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Whether `head` (at least [`FIXED`] bytes) is the header of a block of `len` bytes: magic,
/// version, length and page size.
fn header_ok(head: &[u8], len: usize) -> bool {
    &head[..4] == MAGIC
        && word(head, 4) == VERSION
        && word(head, 8) as usize == len
        && word(head, 12) as usize == PAGE
}

/// Whether page `k` of a block (its `bytes`) matches its checksum in the block's header `head`.
fn page_ok(head: &[u8], seed: u32, k: usize, bytes: &[u8]) -> bool {
    crc32c::crc32c_append(seed, bytes) == word(head, FIXED + 4 * k)
}

/// Refreshes `f`'s modification time (its place in the eviction order) unless `modified`, the
/// time it has, is younger than [`TOUCH_AFTER`].
fn refresh(f: &File, modified: io::Result<SystemTime>) {
    if !modified.is_ok_and(|t| t.elapsed().is_ok_and(|age| age < TOUCH_AFTER)) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// Bytes `within` of a block file's body (block length `len`, header `head`, checked) read with
/// `pread` into `dst`, checking every page they lie in: `Ok(false)` when a page fails. Whole pages
/// are read straight into `dst` and checked there; a page `within` covers only in part (at most
/// one at each end) goes through a page-sized scratch buffer.
fn read_pages(
    f: &File,
    head: &[u8],
    seed: u32,
    len: usize,
    within: std::ops::Range<usize>,
    dst: &mut [u8],
) -> io::Result<bool> {
    let hl = header_len(len);
    let mut pos = within.start;
    while pos < within.end {
        let page = pos / PAGE;
        let (pa, pz) = (page * PAGE, ((page + 1) * PAGE).min(len));
        if pos == pa && pz <= within.end {
            // The run of whole pages from here: to the last page boundary before the end, or
            // to the block's end (its last page may be short).
            let run_end = if within.end == len {
                len
            } else {
                within.end / PAGE * PAGE
            };
            let d = &mut dst[pos - within.start..run_end - within.start];
            if !read_whole(f, d, (hl + pos) as u64)? {
                return Ok(false);
            }
            for (k, bytes) in d.chunks(PAGE).enumerate() {
                if !page_ok(head, seed, page + k, bytes) {
                    return Ok(false);
                }
            }
            pos = run_end;
        } else {
            let mut scratch = [0u8; PAGE];
            let sc = &mut scratch[..pz - pa];
            if !read_whole(f, sc, (hl + pa) as u64)? || !page_ok(head, seed, page, sc) {
                return Ok(false);
            }
            let hi = pz.min(within.end);
            dst[pos - within.start..hi - within.start].copy_from_slice(&sc[pos - pa..hi - pa]);
            pos = hi;
        }
    }
    Ok(true)
}

fn hex(uuid: &[u8; 16]) -> String {
    uuid.iter().map(|b| format!("{b:02x}")).collect()
}

impl BlockCache {
    /// The cache at `dir` (created if missing) holding at most `bound` bytes of blocks of `block`
    /// bytes (a multiple of 4 KiB, at least one page).
    pub(crate) fn open(dir: &Path, bound: u64, block: u64) -> io::Result<BlockCache> {
        if block == 0 || !block.is_multiple_of(PAGE as u64) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cache_block {block} is not a positive multiple of {PAGE}"),
            ));
        }
        fs::create_dir_all(dir)?;
        // Both files exist before any fill takes the lock.
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(".lock"))?;
        let size = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(dir.join(".size"))?;
        Ok(BlockCache {
            dir: dir.to_path_buf(),
            bound,
            block,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            fills: AtomicU64::new(0),
            corrupt: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            error: Mutex::new(None),
            mapped: Mutex::new(Arc::new(Maps::default())),
            size,
            seen_evictions: AtomicU64::new(0),
            next_check: AtomicU64::new(0),
            born: std::time::Instant::now(),
            recheck: RECHECK,
            max_maps: (bound / MAPPED_SHARE / block).clamp(1, MAPPED as u64) as usize,
        })
    }

    /// [`BlockCache::open`], reading the eviction count at every gather and mapping up to
    /// [`MAPPED`] blocks whatever the bound (tests).
    #[cfg(test)]
    pub(crate) fn open_rechecking(dir: &Path, bound: u64, block: u64) -> io::Result<BlockCache> {
        let mut c = Self::open(dir, bound, block)?;
        c.recheck = Duration::ZERO;
        c.max_maps = MAPPED;
        Ok(c)
    }

    /// Drops this store's maps of blocks that were evicted (their files deleted) since it last
    /// looked, when the node's eviction count has moved; looks at most every [`RECHECK`].
    /// Gathers that took an earlier snapshot keep its maps until they end.
    fn drop_evicted(&self) {
        let now = self.born.elapsed().as_millis() as u64;
        let next = self.next_check.load(Ordering::Relaxed);
        let later = now + self.recheck.as_millis() as u64;
        if now < next
            || self
                .next_check
                .compare_exchange(next, later, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let Some(count) = bound::evictions(&self.size) else {
            return;
        };
        if self.seen_evictions.swap(count, Ordering::Relaxed) == count {
            return;
        }
        let gone = bound::deleted(&self.maps().clone());
        self.unmap(&gone);
    }

    /// Publishes a snapshot without the maps of blocks `keys` (those it holds); gathers that took
    /// an earlier snapshot keep them until they end.
    fn unmap(&self, keys: &[Key]) {
        let mut held = self.maps();
        if keys.iter().any(|k| held.contains_key(k)) {
            let mut maps = Maps::clone(&held);
            for k in keys {
                maps.remove(k);
            }
            *held = Arc::new(maps);
        }
    }

    /// The block size in bytes.
    pub(crate) fn block(&self) -> u64 {
        self.block
    }

    /// This process's counts.
    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            fills: self.fills.load(Ordering::Relaxed),
            corrupt: self.corrupt.load(Ordering::Relaxed),
            evicted: self.evicted.load(Ordering::Relaxed),
            last_error: self.error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }

    /// Keeps the first error of the process (the cache then acts as a miss).
    fn note(&self, what: &str, path: &Path, e: &io::Error) {
        let mut held = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if held.is_none() {
            *held = Some(format!("{what} {}: {e}", path.display()));
        }
    }

    fn path(&self, uuid: &[u8; 16], shard: u32, b: u64) -> PathBuf {
        self.dir
            .join(hex(uuid))
            .join(format!("{shard:06}"))
            .join(format!("{b}.blk"))
    }

    /// Reads bytes `within` of block `b` (of `len` bytes) of shard `shard` into `dst`
    /// (`within.len()` bytes), checking the pages they lie in: `true` on a hit. A missing block is
    /// a miss; a damaged one is removed, counted and a miss. The block file is mapped at its first
    /// hit and kept mapped (see [`MAPPED`]), so a hit costs no system call: the pages are checked
    /// and copied from the map.
    ///
    /// With `check` off the pages of a mapped block are not checked: for a caller that checks
    /// every record it takes from `dst` against the record's own checksum, and on a failure reads
    /// again with `check` on (which finds and removes a damaged block).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn read(
        &self,
        uuid: &[u8; 16],
        shard: u32,
        b: u64,
        len: usize,
        within: std::ops::Range<usize>,
        dst: &mut [u8],
        check: bool,
    ) -> bool {
        let key = (*uuid, shard, b);
        let m = match self.find(&key, len) {
            Found::Mapped(m) => m,
            Found::Missing => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            Found::Damaged => return self.damaged(&key),
            Found::Unmapped(f) => return self.read_unmapped(&f, &key, len, within, dst),
        };
        let hl = header_len(len);
        let (head, body) = m.map.split_at(hl);
        if check {
            let seed = block_seed(uuid, shard, b);
            for page in within.start / PAGE..within.end.div_ceil(PAGE) {
                let bytes = &body[page * PAGE..((page + 1) * PAGE).min(len)];
                if !page_ok(head, seed, page, bytes) {
                    return self.damaged(&key);
                }
            }
        }
        dst.copy_from_slice(&body[within]);
        if m.guard.faulted() {
            // The file shrank under the map: what was copied may be the guard's zeros.
            return self.damaged(&key);
        }
        self.hits(1);
        Self::touch(Held(&m), now_secs());
        true
    }

    /// The blocks this store holds mapped now: for a caller that decodes records straight from
    /// [`Held::bytes`], checks each against its own checksum and then [`Held::intact`] (when
    /// `sigbus::caught` moved while it copied), and counts
    /// what passed with [`BlockCache::hits`] (what failed, or was not held, goes through
    /// [`BlockCache::read`], which counts it). Blocks it lacks: [`BlockCache::map_blocks`].
    pub(crate) fn held(&self) -> Snapshot {
        self.drop_evicted();
        Snapshot(self.maps().clone())
    }

    /// Maps the blocks `want` (shard, block, its length) of container `uuid` that the cache holds
    /// and the store's snapshot does not, and returns the store's snapshot with them (the current
    /// one when none needed mapping). At most [`MAPPED`] blocks are mapped (a snapshot holds no
    /// more; the records of the others are read through [`BlockCache::read`]). A block the cache
    /// lacks, or cannot map, is not in it; a damaged one is removed and counted as damage.
    /// Counts no hit or miss.
    pub(crate) fn map_blocks(&self, uuid: &[u8; 16], want: &[(u32, u64, usize)]) -> Snapshot {
        let current = self.held();
        let mut want = want.to_vec();
        want.sort_unstable();
        want.dedup();
        let mut new = Vec::new();
        for (shard, b, len) in want {
            if new.len() == self.max_maps {
                break;
            }
            let key = (*uuid, shard, b);
            if current.0.contains_key(&key) {
                continue;
            }
            match self.map_file(&key, len) {
                Found::Mapped(m) => new.push((key, m)),
                Found::Damaged => self.drop_damaged(&key),
                Found::Missing | Found::Unmapped(_) => {}
            }
        }
        if new.is_empty() {
            return current;
        }
        drop(current);
        Snapshot(self.publish(new))
    }

    /// Counts `n` hits taken through a [`Snapshot`].
    pub(crate) fn hits(&self, n: u64) {
        self.hits.fetch_add(n, Ordering::Relaxed);
    }

    /// Makes `h`'s block recent at `now` (seconds since the epoch): least recently used goes
    /// first, and a hit refreshes the file's time when it is over [`TOUCH_AFTER`] old (a metadata
    /// write per hit would order nothing more).
    pub(crate) fn touch(h: Held<'_>, now: u64) {
        let m = h.0;
        if now.saturating_sub(m.touched.load(Ordering::Relaxed)) >= TOUCH_AFTER.as_secs() {
            m.touched.store(now, Ordering::Relaxed);
            let _ = m.file.set_modified(SystemTime::now());
        }
    }

    /// Block `key`'s map: the one this store holds, or the file mapped now and published.
    fn find(&self, key: &Key, len: usize) -> Found {
        if let Some(m) = self.maps().get(key) {
            return Found::Mapped(m.clone());
        }
        match self.map_file(key, len) {
            Found::Mapped(m) => {
                self.publish(vec![(*key, m.clone())]);
                Found::Mapped(m)
            }
            other => other,
        }
    }

    /// Block `key`'s file mapped (its length and header checked, its time refreshed when that is
    /// over [`TOUCH_AFTER`] old), not yet published.
    fn map_file(&self, key: &Key, len: usize) -> Found {
        let path = self.path(&key.0, key.1, key.2);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) => {
                if e.kind() != io::ErrorKind::NotFound {
                    self.note("open", &path, &e);
                }
                return Found::Missing;
            }
        };
        let meta = match file.metadata() {
            Ok(m) => m,
            Err(e) => {
                self.note("stat", &path, &e);
                return Found::Unmapped(file);
            }
        };
        if meta.len() != (header_len(len) + len) as u64 {
            return Found::Damaged;
        }
        // SAFETY: a block file is never written after it is renamed into place (fills go through
        // a temporary file), and the map is read-only. A file shrunk under it anyway (a stray
        // truncation) raises SIGBUS on a read past its new end; the guard registered here turns
        // that into zeros and a fault mark, which `read` checks after each copy. Without a free
        // guard slot the block is not mapped.
        let map = match unsafe { memmap2::Mmap::map(&file) } {
            Ok(m) => m,
            Err(e) => {
                self.note("map", &path, &e);
                return Found::Unmapped(file);
            }
        };
        let Some(guard) = crate::sigbus::Guard::register(&map) else {
            return Found::Unmapped(file);
        };
        if !header_ok(&map, len) {
            return Found::Damaged;
        }
        refresh(&file, meta.modified());
        Found::Mapped(Arc::new(Mapped {
            head: header_len(len),
            guard,
            map,
            file,
            touched: AtomicU64::new(now_secs()),
        }))
    }

    /// Publishes a snapshot with the maps `new` (at most [`MAPPED`]) added and returns it: at most
    /// [`MAPPED`] maps, half of the others dropped as often as it takes to make room.
    fn publish(&self, new: Vec<(Key, Arc<Mapped>)>) -> Arc<Maps<Arc<Mapped>>> {
        debug_assert!(new.len() <= self.max_maps, "{} new maps", new.len());
        let mut held = self.maps();
        let mut maps = Maps::clone(&held);
        while !maps.is_empty() && maps.len() + new.len() > self.max_maps {
            let mut k = 0;
            maps.retain(|_, _| {
                k += 1;
                k % 2 == 0
            });
        }
        maps.extend(new);
        *held = Arc::new(maps);
        held.clone()
    }

    /// The store's current snapshot, locked (to take or replace it).
    fn maps(&self) -> std::sync::MutexGuard<'_, Arc<Maps<Arc<Mapped>>>> {
        self.mapped.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A block that failed a check: unmapped, its file removed (whoever removes it first wins;
    /// the refetch fills it again), counted; a miss.
    fn damaged(&self, key: &Key) -> bool {
        self.drop_damaged(key);
        self.misses.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// [`BlockCache::damaged`] but for the miss, which the caller counts.
    fn drop_damaged(&self, key: &Key) {
        self.unmap(std::slice::from_ref(key));
        self.corrupt.fetch_add(1, Ordering::Relaxed);
        let _ = fs::remove_file(self.path(&key.0, key.1, key.2));
    }

    /// [`BlockCache::read`] without a map: bytes `within` of block `key` (of `len` bytes) read
    /// from its file `f` with `pread` into `dst`, the header and the pages they lie in checked.
    fn read_unmapped(
        &self,
        f: &File,
        key: &Key,
        len: usize,
        within: std::ops::Range<usize>,
        dst: &mut [u8],
    ) -> bool {
        let (uuid, shard, b) = key;
        // The header, then the pages: `Ok(false)` when one fails its check.
        let checked = || -> io::Result<bool> {
            let mut head = vec![0u8; header_len(len)];
            if !read_whole(f, &mut head, 0)? || !header_ok(&head, len) {
                return Ok(false);
            }
            read_pages(f, &head, block_seed(uuid, *shard, *b), len, within, dst)
        };
        match checked() {
            Ok(true) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                refresh(f, f.metadata().and_then(|m| m.modified()));
                true
            }
            Ok(false) => self.damaged(key),
            Err(e) => {
                self.note("read", &self.path(uuid, *shard, *b), &e);
                self.misses.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Writes block `b` of shard `shard` (its whole `bytes`) into the cache, unless it is there,
    /// then keeps the bound. Failures are noted and otherwise ignored.
    pub(crate) fn fill(&self, uuid: &[u8; 16], shard: u32, b: u64, bytes: &[u8]) {
        let path = self.path(uuid, shard, b);
        if path.exists() {
            return;
        }
        match self.write_block(&path, uuid, shard, b, bytes) {
            Ok(n) => {
                self.fills.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = bound::account(&self.dir, self.bound, n, &self.evicted) {
                    self.note("account", &self.dir.join(".size"), &e);
                }
            }
            Err(e) => self.note("fill", &path, &e),
        }
    }

    /// Writes the block file through a temporary file renamed into place; its length.
    fn write_block(
        &self,
        path: &Path,
        uuid: &[u8; 16],
        shard: u32,
        b: u64,
        bytes: &[u8],
    ) -> io::Result<u64> {
        let dir = path.parent().unwrap_or(&self.dir);
        fs::create_dir_all(dir)?;
        let seed = block_seed(uuid, shard, b);
        let mut head = Vec::with_capacity(header_len(bytes.len()));
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&VERSION.to_le_bytes());
        head.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        head.extend_from_slice(&(PAGE as u32).to_le_bytes());
        for page in bytes.chunks(PAGE) {
            head.extend_from_slice(&crc32c::crc32c_append(seed, page).to_le_bytes());
        }
        let tmp = dir.join(format!(
            ".{b}.{}.{:?}.tmp",
            std::process::id(),
            std::thread::current().id()
        ));
        let written = (|| {
            let mut f = File::create(&tmp)?;
            f.write_all(&head)?;
            f.write_all(bytes)?;
            // No fsync: a block torn by a crash fails its check and is fetched again.
            fs::rename(&tmp, path)
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written.map(|()| (head.len() + bytes.len()) as u64)
    }
}

#[cfg(test)]
mod tests;
