//! Cold gathers through the public API: under every `ColdReads` policy, a gather of a store whose
//! pages were evicted returns the stored bytes, and a damaged record is still reported (the cold
//! path requests pages; the copy that verifies them is the warm one).

use std::os::fd::AsRawFd;
use std::sync::Arc;

use zrecord::{
    Allocator, Codec, ColdReads, DType, DenseStore, Error, OpenOptions, RaggedStore, RaggedWriter,
    SystemAllocator, WriterOptions,
};

fn evict(path: &std::path::Path) {
    for f in zrecord::container_files(path).unwrap() {
        let file = std::fs::File::open(&f).unwrap();
        file.sync_all().unwrap();
        // SAFETY: the descriptor is open for the call; the advice only drops clean cached pages.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

fn opts(cold: ColdReads) -> OpenOptions {
    OpenOptions {
        cold_reads: cold,
        ..OpenOptions::default()
    }
}

/// Runs `f` with direct reads made by blocking readers (`blocking`) or by the default engine.
fn with_engine<R>(blocking: bool, f: impl FnOnce() -> R) -> R {
    if blocking {
        zrecord::testing::with_blocking_direct_reads(f)
    } else {
        f()
    }
}

#[test]
fn every_policy_returns_the_stored_records_of_an_evicted_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d");
    let (n, stride) = (3000usize, 2048usize);
    let data: Vec<u8> = (0..n * stride).map(|k| (k * 31 / 7) as u8).collect();
    let mut w = zrecord::DenseWriter::create(
        &path,
        DType::Int32,
        &[512],
        Codec::Raw,
        WriterOptions::default(),
    )
    .unwrap();
    w.append(&data).unwrap();
    w.close().unwrap();
    let alloc: Arc<dyn Allocator> = Arc::new(SystemAllocator::new());
    let idx: Vec<u64> = (0..256u64).map(|k| (k * 2654435761) % n as u64).collect();
    // (policy, blocking readers instead of io_uring for direct reads)
    for (cold, blocking) in [
        (ColdReads::Auto, false),
        (ColdReads::Always, false),
        (ColdReads::Always, true),
        (ColdReads::Never, false),
    ] {
        evict(&path);
        let store = DenseStore::open_with(&path, opts(cold)).unwrap();
        let view = store.bind(alloc.clone());
        let b = with_engine(blocking, || view.gather(&idx)).unwrap();
        for (k, &i) in idx.iter().enumerate() {
            let i = i as usize;
            assert_eq!(
                &b.bytes()[k * stride..(k + 1) * stride],
                &data[i * stride..(i + 1) * stride],
                "{cold:?} record {i}"
            );
        }
        let ext = store.record_extents(&idx[..3]).unwrap();
        assert_eq!(ext.len(), 3);
        assert!(ext.iter().all(|e| e.len == stride as u64));
    }
    assert!(matches!(
        DenseStore::open(&path).unwrap().record_extents(&[n as u64]),
        Err(Error::IndexOutOfRange { .. })
    ));
}

#[test]
fn a_damaged_record_is_reported_on_the_cold_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r");
    let lens: Vec<u64> = (0..500u64).map(|k| 16 + k % 300).collect();
    let total: u64 = lens.iter().sum();
    let values: Vec<u8> = (0..total * 4).map(|k| (k % 251) as u8).collect();
    let mut cu = vec![0i32];
    for l in &lens {
        cu.push(cu.last().unwrap() + *l as i32);
    }
    let mut w =
        RaggedWriter::create(&path, DType::Int32, 1, Codec::Raw, WriterOptions::default()).unwrap();
    w.append(&values, &cu, &lens).unwrap();
    w.close().unwrap();
    let victim = 250u64;
    let ext = RaggedStore::open(&path)
        .unwrap()
        .record_extents(&[victim])
        .unwrap();
    let mut bytes = std::fs::read(&ext[0].path).unwrap();
    bytes[ext[0].offset as usize + 5] ^= 0x40;
    std::fs::write(&ext[0].path, &bytes).unwrap();
    evict(&path);
    let alloc: Arc<dyn Allocator> = Arc::new(SystemAllocator::new());
    let view = RaggedStore::open_with(&path, opts(ColdReads::Always))
        .unwrap()
        .bind(alloc);
    let idx: Vec<u64> = (0..100u64).map(|k| k * 5).collect();
    for blocking in [false, true] {
        match with_engine(blocking, || view.gather(&idx)) {
            Err(Error::Corrupt { at, .. }) => assert_eq!(at.record, Some(victim)),
            other => panic!("expected a corruption error for record {victim}, got {other:?}"),
        }
    }
}

/// Whether every page of `len` bytes at `offset` of `file` is out of the page cache (a private
/// mapping of the file, asked with `mincore`).
fn none_resident(file: &std::path::Path, offset: u64, len: u64) -> bool {
    let f = std::fs::File::open(file).unwrap();
    // SAFETY: a read-only map of the test's own file, which nothing modifies while it is mapped.
    let map = unsafe { memmap2::Mmap::map(&f).unwrap() };
    let page = 4096u64;
    let start = offset / page * page;
    let end = offset + len;
    let pages = (end - start).div_ceil(page) as usize;
    let mut vec = vec![0u8; pages];
    // SAFETY: the range lies inside the live mapping (start is page-aligned, end within the file
    // rounded up to a page); mincore writes one byte per page into `vec`, which has that many.
    let rc = unsafe {
        libc::mincore(
            map.as_ptr().add(start as usize) as *mut libc::c_void,
            (end - start) as usize,
            vec.as_mut_ptr(),
        )
    };
    assert_eq!(rc, 0);
    vec.iter().all(|v| v & 1 == 0)
}

/// A Ragged store of `uint8` records whose lengths run from 5 KiB to 2.6 MiB, so records start at
/// unaligned offsets and some span several of the direct path's 1 MiB reads.
fn large_ragged(path: &std::path::Path) -> (Vec<u8>, Vec<usize>) {
    let lens: Vec<usize> = (0..40usize)
        .map(|k| 5_003 + (k * 7_919_993) % 2_700_000)
        .collect();
    let total: usize = lens.iter().sum();
    let values: Vec<u8> = (0..total)
        .map(|k| (k as u32).wrapping_mul(2_654_435_761).rotate_right(11) as u8)
        .collect();
    let mut cu = vec![0i32];
    for l in &lens {
        cu.push(cu.last().unwrap() + *l as i32);
    }
    let shapes: Vec<u64> = lens.iter().map(|&l| l as u64).collect();
    let mut w =
        RaggedWriter::create(path, DType::UInt8, 1, Codec::Raw, WriterOptions::default()).unwrap();
    w.append(&values, &cu, &shapes).unwrap();
    w.close().unwrap();
    let mut starts = vec![0usize];
    for l in &lens {
        starts.push(starts.last().unwrap() + l);
    }
    (values, starts)
}

#[test]
fn cold_large_records_are_read_past_the_page_cache_and_verified() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big");
    let (values, starts) = large_ragged(&path);
    let n = starts.len() as u64 - 1;
    let idx: Vec<u64> = (0..64u64).map(|k| (k * 17 + 3) % n).collect();
    let alloc: Arc<dyn Allocator> = Arc::new(SystemAllocator::new());
    // (policy, verify, blocking readers instead of io_uring)
    for (cold, verify, blocking) in [
        (ColdReads::Auto, true, false),
        (ColdReads::Always, true, false),
        (ColdReads::Always, false, false),
        (ColdReads::Always, true, true),
    ] {
        let store = RaggedStore::open_with(
            &path,
            OpenOptions {
                cold_reads: cold,
                verify,
                ..OpenOptions::default()
            },
        )
        .unwrap();
        let ext = store.record_extents(&idx).unwrap();
        // Evicted after the open, whose header checks fault in the start of each shard.
        evict(&path);
        // Eviction is best effort (tmpfs keeps every page, for one; pages the open mapped stay):
        // the test can only tell which path read a record that was out of the cache before.
        let was_cold: Vec<bool> = ext
            .iter()
            .map(|e| none_resident(&e.path, e.offset, e.len))
            .collect();
        let view = store.bind(alloc.clone());
        let b = with_engine(blocking, || view.gather(&idx)).unwrap();
        let mut at = 0;
        for &i in &idx {
            let (s, e) = (starts[i as usize], starts[i as usize + 1]);
            assert!(
                b.values()[at..at + e - s] == values[s..e],
                "{cold:?} verify {verify} blocking {blocking}: record {i}"
            );
            at += e - s;
        }
        for (e, _) in ext.iter().zip(&was_cold).filter(|(_, cold)| **cold) {
            if cold == ColdReads::Always {
                // Read directly: nothing was added to the page cache.
                assert!(
                    none_resident(&e.path, e.offset, e.len),
                    "{cold:?}: the record at byte {} went through the page cache",
                    e.offset
                );
            } else {
                // A store that fits in memory is read through the page cache, so it warms up.
                assert!(
                    !none_resident(&e.path, e.offset, e.len),
                    "{cold:?}: the record at byte {} was not cached",
                    e.offset
                );
            }
        }
    }
}

#[test]
fn damage_in_a_later_piece_of_a_large_record_is_reported_on_the_direct_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big");
    let (_, starts) = large_ragged(&path);
    // The longest record: damage it past its first 1 MiB read.
    let victim = (0..starts.len() - 1)
        .max_by_key(|&i| starts[i + 1] - starts[i])
        .unwrap() as u64;
    let store = RaggedStore::open(&path).unwrap();
    let ext = store.record_extents(&[victim]).unwrap().remove(0);
    assert!(ext.len > 2 << 20);
    drop(store);
    let mut bytes = std::fs::read(&ext.path).unwrap();
    bytes[(ext.offset + ext.len - 3) as usize] ^= 0x01;
    std::fs::write(&ext.path, &bytes).unwrap();
    evict(&path);
    let alloc: Arc<dyn Allocator> = Arc::new(SystemAllocator::new());
    let view = RaggedStore::open_with(&path, opts(ColdReads::Always))
        .unwrap()
        .bind(alloc);
    let idx = [0, victim, 1, 2];
    match view.gather(&idx) {
        Err(Error::Corrupt { at, .. }) => {
            assert_eq!(at.record, Some(victim));
            assert_eq!(at.offset, Some(ext.offset));
        }
        other => panic!("expected a corruption error for record {victim}, got {other:?}"),
    }
}
