//! An index read by page into process memory, within a process-wide bound: the index of a local
//! container that is not copied whole at open (one over 64 MiB, or past the process's copy
//! budget) lives in an anonymous region as long as the index file, reserved but not backed, whose
//! pages are read from the file (`pread`) the first time a read needs their entries after open or
//! after a release. The first read of an index page (4,096 entries) reads all of it and checks its
//! checksum; later reads of a released part of it read only the memory pages the entries need.
//!
//! The bound (`index::set_index_memory`, default 512 MiB) is shared with the index
//! copies and checksum tables (`index::Charge`): half of it for those, half for the pages read
//! here, over every container the process has open. Once the pages read here pass their half,
//! every paged index that no read holds at that moment drops them (`MADV_DONTNEED`: the region's
//! memory is freed and reads as zeros until read again). A read holds its indexes' pages from
//! [`Paged::hold`] until its guard drops, so no read ever sees a dropped page; an index held by a
//! read during a release keeps its pages until the next one, so the bound holds within the pages
//! that reads held at that moment.
//!
//! Why not the file map the rest of the container uses: the kernel maps a file's page cache into
//! the process in folios of up to 2 MiB on a read fault (a file written sequentially is cached
//! that way), so a random epoch over a mapped index holds most of it in RSS whatever is dropped.

use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, Weak};

use crate::error::{Error, Result};
use crate::format::{self, HEADER_LEN, Manifest};
use crate::source::{Opener, ReadFile};

use super::super::hint::page_size;
use super::files::missing_or_io;
use super::index::{check_length_and_header, check_page_crc, index_memory};

/// An unmapped store's (object storage, a shared file system) index larger than this (1 MiB:
/// 64 Ki records of 16-byte entries) is paged rather than read whole at open.
pub(super) const UNMAPPED_WHOLE_INDEX: u64 = 1 << 20;

/// Bytes of paged indexes' memory pages read in, over every [`Paged`].
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Every live [`Paged`], for a release.
static ALL: Mutex<Vec<Weak<Paged>>> = Mutex::new(Vec::new());

/// One bit per item, set and tested without a lock.
struct Bits(Box<[AtomicU64]>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits((0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect())
    }

    #[inline]
    fn has(&self, k: usize) -> bool {
        self.0[k / 64].load(Ordering::Acquire) & (1 << (k % 64)) != 0
    }

    fn set(&self, k: usize) {
        self.0[k / 64].fetch_or(1 << (k % 64), Ordering::Release);
    }
}

/// A paged index. See the module docs.
pub(super) struct Paged {
    /// The index file, read with positional reads.
    file: Arc<dyn ReadFile>,
    path: PathBuf,
    m: Manifest,
    /// The anonymous region, `len` bytes (the index file's length).
    region: NonNull<u8>,
    len: usize,
    /// Index pages whose checksum a read into the region has checked.
    checked: Bits,
    /// Memory pages of the region read in since open or the last release.
    filled: Bits,
    /// How many `filled` bits are set.
    filled_pages: AtomicUsize,
    /// Serializes reads into the region (two readers of one page would write it twice).
    fill: Mutex<()>,
    /// Held (shared) by every read from [`Paged::hold`] until its guard drops; a release takes it
    /// exclusively, without waiting.
    readers: RwLock<()>,
}

// SAFETY: the region is owned by this value alone; it is written only under `fill` in pages no
// read holds (unfilled), and released only under `readers` held exclusively (no read holds it).
unsafe impl Send for Paged {}
// SAFETY: as above: shared access reads filled pages only.
unsafe impl Sync for Paged {}

impl ReadFile for Paged {
    fn bytes(&self) -> &[u8] {
        // SAFETY: the region is `len` readable bytes mapped for as long as `self` lives. Its
        // bytes change only where no read looks (see the `Sync` note), as a file map's do when
        // another process writes a part of the file it does not read.
        unsafe { std::slice::from_raw_parts(self.region.as_ptr(), self.len) }
    }
}

/// A read's hold on a paged index's pages: none of them is released while it lives.
type Hold<'a> = RwLockReadGuard<'a, ()>;

/// A read's hold on a container's index entries (`Container::check_pages`): a paged index keeps
/// the pages read in for the read until it drops; any other index needs no hold.
#[must_use = "the entries may be read only while the guard lives"]
pub(in crate::read) struct IndexGuard<'a> {
    _hold: Option<Hold<'a>>,
}

impl IndexGuard<'_> {
    /// Reads in the pages of records `idx` of `paged` (entries of `entry` bytes) and holds them.
    pub(super) fn hold<'a>(
        paged: Option<&'a Paged>,
        idx: &[u64],
        entry: usize,
    ) -> Result<IndexGuard<'a>> {
        Ok(IndexGuard {
            _hold: paged.map(|p| p.hold(idx, entry)).transpose()?,
        })
    }

    /// Reads in every page of `paged` and holds them.
    pub(super) fn hold_all(paged: Option<&Paged>) -> Result<IndexGuard<'_>> {
        Ok(IndexGuard {
            _hold: paged.map(Paged::hold_all).transpose()?,
        })
    }
}

impl Paged {
    /// The paged index of the local container with manifest `m` at `path` (its index file, which
    /// the open checked), or `None` where the file system maps files even when asked not to.
    pub(super) fn for_index(
        opener: &dyn Opener,
        path: &Path,
        m: &Manifest,
    ) -> Result<Option<Arc<Paged>>> {
        Paged::open(opener, path, m, false)
    }

    /// The index file at `path` opened for positional reads, its length and header checked when
    /// `check`, as a paged index; `None` where the file system maps it anyway.
    fn open(
        opener: &dyn Opener,
        path: &Path,
        m: &Manifest,
        check: bool,
    ) -> Result<Option<Arc<Paged>>> {
        let f = opener
            .open_read_unmapped(path)
            .map_err(|e| missing_or_io(path, None, e))?;
        if f.mapped() {
            return Ok(None);
        }
        if check {
            check_file(&*f, path, m)?;
        }
        Paged::new(f, path.to_path_buf(), m).map(Some)
    }

    /// The paged index of the unmapped container with manifest `m` at `path` (its index file):
    /// the file's length and header checked here, its pages as reads need them; `None` where
    /// the file system maps files even when asked not to.
    pub(super) fn open_checked(
        opener: &dyn Opener,
        path: &Path,
        m: &Manifest,
    ) -> Result<Option<Arc<Paged>>> {
        Paged::open(opener, path, m, true)
    }

    /// A paged index of the container with manifest `m` whose index file (`path`, opened for
    /// positional reads as `file`) the open checked: its length and header, and every page when
    /// the container is checked whole at open. No page is read in yet.
    fn new(file: Arc<dyn ReadFile>, path: PathBuf, m: &Manifest) -> Result<Arc<Paged>> {
        let len = m.index_len as usize;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len.max(1),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::io(
                "reserve memory for the index of",
                &path,
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: the region just mapped. Small pages keep a page read in to its own size (the
        // count below); a failed advice only costs that precision.
        unsafe { libc::madvise(p, len.max(1), libc::MADV_NOHUGEPAGE) };
        name_region(p, len.max(1));
        let pages = m.records.div_ceil(format::PAGE_ENTRIES) as usize;
        let paged = Arc::new(Paged {
            file,
            path,
            m: m.clone(),
            // SAFETY: mmap returned a non-null address (MAP_FAILED was ruled out).
            region: unsafe { NonNull::new_unchecked(p.cast::<u8>()) },
            len,
            checked: Bits::new(pages),
            filled: Bits::new(len.div_ceil(page_size())),
            filled_pages: AtomicUsize::new(0),
            fill: Mutex::new(()),
            readers: RwLock::new(()),
        });
        let mut all = ALL.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(&paged));
        Ok(paged)
    }

    /// Reads in the pages holding the entries of records `idx` (each `entry` bytes) and holds
    /// them until the returned guard drops. Past the bound, every paged index no read holds is
    /// released first. A page that fails its checksum is an error naming the index page.
    fn hold(&self, idx: &[u64], entry: usize) -> Result<Hold<'_>> {
        if HELD.load(Ordering::Relaxed) > index_memory() / 2 {
            release_all();
        }
        let hold = self.readers.read().unwrap_or_else(|e| e.into_inner());
        let ps = page_size();
        // An entry is read once its index page was read whole and checked and its own memory
        // pages are read in (a neighbour's read may have read in the page an entry starts on).
        let missing = |i: u64| {
            let off = format::entry_offset(i, entry);
            !self.checked.has((i / format::PAGE_ENTRIES) as usize)
                || !self.filled.has(off / ps)
                || !self.filled.has((off + entry - 1) / ps)
        };
        if idx.iter().any(|&i| missing(i)) {
            let _fill = self.fill.lock().unwrap_or_else(|e| e.into_inner());
            let ids: Vec<u64> = idx.iter().copied().filter(|&i| missing(i)).collect();
            self.read_in(&ids, entry)?;
        }
        Ok(hold)
    }

    /// Reads every page in (for `verify()`, which reads every entry) and holds them.
    fn hold_all(&self) -> Result<Hold<'_>> {
        let hold = self.readers.read().unwrap_or_else(|e| e.into_inner());
        let _fill = self.fill.lock().unwrap_or_else(|e| e.into_inner());
        let pages: Vec<u64> = (0..self.m.records.div_ceil(format::PAGE_ENTRIES)).collect();
        // Some index pages at a time: one round of reads each (concurrent on object storage).
        for some in pages.chunks(64) {
            self.read_spans(some, &[])?;
        }
        Ok(hold)
    }

    /// Reads in index page `page` whole, for a check of all its entries; the caller holds the
    /// index ([`Paged::hold`]).
    pub(super) fn read_whole(&self, page: u64) -> Result<()> {
        let _fill = self.fill.lock().unwrap_or_else(|e| e.into_inner());
        self.read_spans(&[page], &[])
    }

    /// Reads in what the entries of records `ids` need, with one round of reads (concurrent
    /// on object storage): the whole index page of each, checked, the first time; after that the
    /// memory pages each entry spans. Called under `fill` and a hold.
    #[cold]
    fn read_in(&self, ids: &[u64], entry: usize) -> Result<()> {
        let mut whole: Vec<u64> = ids
            .iter()
            .map(|i| i / format::PAGE_ENTRIES)
            .filter(|&p| !self.checked.has(p as usize))
            .collect();
        whole.sort_unstable();
        whole.dedup();
        let entries: Vec<(usize, usize)> = ids
            .iter()
            .filter(|&&i| self.checked.has((i / format::PAGE_ENTRIES) as usize))
            .map(|&i| {
                let off = format::entry_offset(i, entry);
                (off, off + entry)
            })
            .collect();
        self.read_spans(&whole, &entries)
    }

    /// Bytes `start..end` of the index file that index page `page` (its entries and checksum)
    /// takes.
    fn page_span(&self, page: u64) -> (usize, usize) {
        let first = page * format::PAGE_ENTRIES;
        let k = (self.m.records - first).min(format::PAGE_ENTRIES) as usize;
        let pos = HEADER_LEN + (first as usize) * self.m.entry_size() + 4 * page as usize;
        (pos, pos + k * self.m.entry_size() + 4)
    }

    /// Reads in index pages `whole` (each checked once) and the byte spans `spans`: the memory
    /// pages of them not read in, as runs, in one [`ReadFile::read_many`]. Called under `fill`
    /// and a hold.
    fn read_spans(&self, whole: &[u64], spans: &[(usize, usize)]) -> Result<()> {
        let ps = page_size();
        let last = self.len.div_ceil(ps);
        let mut mem: Vec<usize> = whole
            .iter()
            .map(|&p| self.page_span(p))
            .chain(spans.iter().copied())
            .flat_map(|(s, e)| s / ps..e.div_ceil(ps).min(last))
            .collect();
        mem.sort_unstable();
        mem.dedup();
        // Pages already read in hold the file's bytes and may be read by another thread right
        // now: only the others are written, one read per run of consecutive ones. (Under `fill`
        // and a hold no page becomes read in or released meanwhile.)
        let todo: Vec<usize> = mem
            .iter()
            .copied()
            .filter(|&p| !self.filled.has(p))
            .collect();
        let mut reads: Vec<(u64, &mut [u8])> = Vec::new();
        for run in todo.chunk_by(|a, b| *b == a + 1) {
            let (x, y) = (
                (run[0] * ps).max(HEADER_LEN),
                ((run[run.len() - 1] + 1) * ps).min(self.len),
            );
            if x < y {
                // SAFETY: `x..y` lies inside the region, in pages not read in: no read looks at
                // them (a read looks only at pages its hold read in), `fill` keeps other writers
                // out, and the runs do not overlap (sorted, distinct pages).
                let dst =
                    unsafe { std::slice::from_raw_parts_mut(self.region.as_ptr().add(x), y - x) };
                reads.push((x as u64, dst));
            }
        }
        if !reads.is_empty() {
            self.file
                .read_many(&mut reads)
                .map_err(|e| Error::io("read the index", &self.path, e))?;
        }
        // The bytes read are trusted only once their index page's checksum matched: until then
        // no page is marked read in, so a failed check fails again on the next read.
        for &p in whole {
            if !self.checked.has(p as usize) {
                check_page_crc(&self.m, self.bytes(), &self.path, p)?;
                self.checked.set(p as usize);
            }
        }
        for p in mem {
            if !self.filled.has(p) {
                self.filled.set(p);
                self.filled_pages.fetch_add(1, Ordering::Relaxed);
                HELD.fetch_add(ps, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Drops every page read in, unless a read holds them.
    fn release(&self) {
        let Ok(_excl) = self.readers.try_write() else {
            return;
        };
        let _fill = self.fill.lock().unwrap_or_else(|e| e.into_inner());
        for w in self.filled.0.iter() {
            w.store(0, Ordering::Release);
        }
        let n = self.filled_pages.swap(0, Ordering::Relaxed);
        HELD.fetch_sub(n * page_size(), Ordering::Relaxed);
        // SAFETY: the whole region, mapped by `new`; no read holds it (exclusive `readers`), and
        // its pages read as zeros until read in again, which every read does first.
        unsafe {
            libc::madvise(
                self.region.as_ptr().cast(),
                self.len.max(1),
                libc::MADV_DONTNEED,
            )
        };
    }
}

impl Drop for Paged {
    fn drop(&mut self) {
        HELD.fetch_sub(
            self.filled_pages.load(Ordering::Relaxed) * page_size(),
            Ordering::Relaxed,
        );
        // SAFETY: the region mapped by `new`, `len.max(1)` bytes; nothing refers to it any more.
        unsafe { libc::munmap(self.region.as_ptr().cast(), self.len.max(1)) };
    }
}

/// Checks the index file `f` at `path` against manifest `m`: its length and its header.
fn check_file(f: &dyn ReadFile, path: &Path, m: &Manifest) -> Result<()> {
    let mut head = [0u8; HEADER_LEN];
    if f.file_len() >= HEADER_LEN as u64 {
        f.read_exact_at(&mut head, 0)
            .map_err(|e| Error::io("read the header of", path, e))?;
    }
    check_length_and_header(m, path, f.file_len(), &head)
}

/// Releases every paged index that no read holds.
#[cold]
fn release_all() {
    let mut all = match ALL.try_lock() {
        Ok(all) => all,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        // Another thread is releasing.
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    all.retain(|w| w.strong_count() > 0);
    let live: Vec<Arc<Paged>> = all.iter().filter_map(Weak::upgrade).collect();
    drop(all);
    for p in live {
        p.release();
    }
}

/// Names the region in `/proc/<pid>/smaps` (`[anon:zrecord index]`) where the kernel allows it.
fn name_region(p: *mut libc::c_void, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const PR_SET_VMA: libc::c_int = 0x53564d41;
        const PR_SET_VMA_ANON_NAME: libc::c_ulong = 0;
        static NAME: &[u8] = b"zrecord index\0";
        // SAFETY: names this process's own anonymous mapping `p..p + len` with a static string;
        // an older kernel refuses it (EINVAL), which changes nothing.
        unsafe {
            libc::prctl(
                PR_SET_VMA,
                PR_SET_VMA_ANON_NAME,
                p as libc::c_ulong,
                len as libc::c_ulong,
                NAME.as_ptr() as libc::c_ulong,
            )
        };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (p, len);
}
