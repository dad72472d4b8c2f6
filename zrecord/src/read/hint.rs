//! Hints to the CPU and the kernel that change speed, never results: [`prefetch`] (load bytes
//! into cache ahead of their copy), [`resident`] (whether a mapped page is in the page cache) and
//! [`will_need`] (ask the kernel to start reading pages). Shared by the container's per-record
//! prefetches, the cold-read policy and the views.

/// How many records ahead a gather prefetches record bytes (index entries: twice as far).
pub(super) const PREFETCH_AHEAD: usize = 4;

/// Prefetch this many leading bytes of a record: its first cache line, which starts the page walk
/// and the first miss; the hardware prefetcher streams the rest once the copy reaches it. On a
/// 600 MiB store of 2 KiB records (Xeon, interleaved `harness gap-probe`), one line 4 records
/// ahead gathered 1.04x `npy-mmap-raw`, 512 bytes 0.98x, the whole record 0.80x: 32 prefetches per
/// record hold the line-fill buffers the demand loads need (docs/performance.md).
pub(super) const PREFETCH_BYTES: usize = 64;

/// Hints the CPU to load `bytes` into cache; no architectural effect.
#[inline(always)]
pub(super) fn prefetch(bytes: &[u8]) {
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

/// The size of a memory page, read once.
pub(super) fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no memory effects; it only returns a configuration value.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if p > 0 { p as usize } else { 4096 }
    })
}

/// Whether the page holding `byte` is in the page cache. Anything `mincore` cannot answer (memory
/// that is not a mapping, e.g. a test file system's heap bytes) counts as resident: the cold path
/// only engages on evidence.
pub(super) fn resident(byte: &[u8]) -> bool {
    let page = page_size();
    let addr = byte.as_ptr() as usize & !(page - 1);
    let mut vec = 0u8;
    // SAFETY: `addr` is the page-aligned start of a page that holds a byte of a live slice; mincore
    // only reads the process's page tables and writes one byte (one page) into `vec`.
    let rc = unsafe { libc::mincore(addr as *mut libc::c_void, page, &mut vec) };
    rc != 0 || vec & 1 == 1
}

/// Asks the kernel to start reading the pages spanning `bytes` (`MADV_WILLNEED`: the reads are
/// queued and the call returns without waiting for them). A hint: a failure changes nothing but
/// speed, so it is ignored.
pub(super) fn will_need(bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let page = page_size();
    let start = bytes.as_ptr() as usize & !(page - 1);
    let end = bytes.as_ptr() as usize + bytes.len();
    // SAFETY: the range covers whole pages of a live mapping (or of heap memory, where the advice
    // is a no-op); MADV_WILLNEED never changes the contents or the protection of memory.
    unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_WILLNEED) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn residency_of_touched_and_untouched_file_pages() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let page = page_size();
        std::fs::write(&p, vec![7u8; 64 * page]).unwrap();
        // Written back, so the pages are clean and can be evicted below.
        std::fs::File::open(&p).unwrap().sync_all().unwrap();
        let f = std::fs::File::open(&p).unwrap();
        // SAFETY: the test's own file, not modified while mapped.
        let map = unsafe { memmap2::Mmap::map(&f).unwrap() };
        // Just written: the pages are in the page cache.
        assert!(resident(&map[..1]));
        // Evict the file's pages (clean pages of a file nobody else maps), then one is
        // non-resident until read again.
        // SAFETY: the range is the whole live mapping; MADV_DONTNEED on a read-only file mapping
        // only drops this process's page-table entries.
        unsafe {
            libc::madvise(
                map.as_ptr() as *mut libc::c_void,
                map.len(),
                libc::MADV_DONTNEED,
            )
        };
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is open; fadvise only changes page-cache state of this file.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        let evicted = !resident(&map[32 * page..32 * page + 1]);
        // Eviction is best effort (a page under writeback stays); when it happened, a
        // WILLNEED request brings the page back, waited for by reading it.
        if evicted {
            will_need(&map[32 * page..33 * page]);
            assert_eq!(map[32 * page], 7);
            assert!(resident(&map[32 * page..32 * page + 1]));
        }
        // Heap memory: mincore answers resident (or fails), never "cold".
        let heap = vec![1u8; 10];
        assert!(resident(&heap[..1]));
        will_need(&heap);
        will_need(&[]);
    }
}
