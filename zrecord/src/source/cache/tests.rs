//! Unit tests of the node-local cache: fills read back, damage is a counted miss (when pages are
//! checked), the bound evicts the least recently used blocks, bad block sizes are refused, and a
//! block the cache cannot write (a full disk) is a miss with its error kept.

use super::*;

const UUID: [u8; 16] = [7; 16];

fn bytes(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i * 31 + salt as usize) as u8).collect()
}

fn read_all(
    c: &BlockCache,
    shard: u32,
    b: u64,
    len: usize,
    r: std::ops::Range<usize>,
) -> Option<Vec<u8>> {
    let mut dst = vec![0u8; r.len()];
    c.read(&UUID, shard, b, len, r, &mut dst, true)
        .then_some(dst)
}

#[test]
fn a_filled_block_reads_back_any_range() {
    let d = tempfile::tempdir().unwrap();
    let c = BlockCache::open(d.path(), 1 << 30, 16 * 4096).unwrap();
    let data = bytes(16 * 4096 - 100, 1);
    assert_eq!(read_all(&c, 0, 3, data.len(), 0..10), None);
    c.fill(&UUID, 0, 3, &data);
    for r in [
        0..1,
        4095..4097,
        5000..60000,
        0..data.len(),
        data.len() - 1..data.len(),
    ] {
        assert_eq!(
            read_all(&c, 0, 3, data.len(), r.clone()).as_deref(),
            Some(&data[r])
        );
    }
    // Another shard, block or length is another key (or a failed check).
    assert_eq!(read_all(&c, 1, 3, data.len(), 0..10), None);
    assert_eq!(read_all(&c, 0, 4, data.len(), 0..10), None);
    let s = c.stats();
    assert_eq!((s.fills, s.corrupt, s.last_error), (1, 0, None));
}

#[test]
fn a_damaged_page_is_a_miss_counted_and_removed() {
    let d = tempfile::tempdir().unwrap();
    let c = BlockCache::open(d.path(), 1 << 30, 4 * 4096).unwrap();
    let data = bytes(4 * 4096, 2);
    c.fill(&UUID, 2, 0, &data);
    let path = c.path(&UUID, 2, 0);
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    // One byte of the third page.
    f.write_all_at(
        &[data[2 * 4096 + 5] ^ 1],
        (header_len(data.len()) + 2 * 4096 + 5) as u64,
    )
    .unwrap();
    // Pages 0-1 still check; page 2 does not.
    assert!(read_all(&c, 2, 0, data.len(), 0..8192).is_some());
    assert_eq!(read_all(&c, 2, 0, data.len(), 8192..8200), None);
    assert!(!path.exists());
    assert_eq!(c.stats().corrupt, 1);
    // A block renamed to another key fails too.
    c.fill(&UUID, 2, 0, &data);
    fs::rename(&path, c.path(&UUID, 2, 1)).unwrap();
    assert_eq!(read_all(&c, 2, 1, data.len(), 0..10), None);
    assert_eq!(c.stats().corrupt, 2);
}

#[test]
fn unchecked_hits_leave_the_pages_to_the_caller_until_it_asks_for_a_check() {
    let d = tempfile::tempdir().unwrap();
    let c = BlockCache::open(d.path(), 1 << 30, 4 * 4096).unwrap();
    let data = bytes(3 * 4096 + 7, 4);
    // Mapping counts nothing: its caller counts the hits it took, and what it did not take
    // goes through `read`, which counts.
    let want = [(0, 0, data.len())];
    let snap = c.map_blocks(&UUID, &want);
    assert!(snap.get(&UUID, 0, 0).is_none());
    assert_eq!(c.stats().misses, 0);
    c.fill(&UUID, 0, 0, &data);
    // A snapshot taken before the block was mapped does not hold it; mapping publishes a new one.
    let before = c.held();
    let snap = c.map_blocks(&UUID, &want);
    assert!(before.get(&UUID, 0, 0).is_none());
    let h = snap.get(&UUID, 0, 0).expect("a filled block is held");
    assert!(c.held().get(&UUID, 0, 0).is_some());
    assert_eq!(h.bytes(), &data[..]);
    assert!(h.intact());
    c.hits(1);
    BlockCache::touch(h, now_secs());
    assert_eq!(c.stats().hits, 1);
    // A stray write into page 1: the map shows it; an unchecked read passes it on (the caller's
    // record checksums catch it), a checked one removes the block.
    let path = c.path(&UUID, 0, 0);
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[data[4100] ^ 1], (header_len(data.len()) + 4100) as u64)
        .unwrap();
    assert_ne!(h.bytes()[4100], data[4100]);
    let mut dst = vec![0u8; 10];
    assert!(c.read(&UUID, 0, 0, data.len(), 4096..4106, &mut dst, false));
    assert_ne!(dst, data[4096..4106]);
    assert!(!c.read(&UUID, 0, 0, data.len(), 4096..4106, &mut dst, true));
    assert!(!path.exists());
    let s = c.stats();
    assert_eq!((s.hits, s.corrupt), (2, 1));
    // Gone from the store's snapshot; the one taken before still holds its (readable) map.
    assert!(c.map_blocks(&UUID, &want).get(&UUID, 0, 0).is_none());
    assert_eq!(snap.get(&UUID, 0, 0).map(|h| h.bytes()[0]), Some(data[0]));
}

/// The `pread` path a block takes when it cannot be mapped (no `SIGBUS` guard slot left, or a
/// failed map): any range of whole and partial pages reads back, a damaged page or header or a
/// short file is a counted miss and removes the block.
#[test]
fn a_block_read_without_a_map_checks_what_it_reads() {
    let d = tempfile::tempdir().unwrap();
    let c = BlockCache::open(d.path(), 1 << 30, 4 * 4096).unwrap();
    let data = bytes(3 * 4096 + 700, 5);
    let unmapped = |b: u64, r: std::ops::Range<usize>| {
        let f = File::open(c.path(&UUID, 0, b)).ok()?;
        let mut dst = vec![0u8; r.len()];
        c.read_unmapped(&f, &(UUID, 0, b), data.len(), r, &mut dst)
            .then_some(dst)
    };
    for b in 0..4 {
        c.fill(&UUID, 0, b, &data);
    }
    for r in [
        0..1,
        100..4096,
        4000..4200,
        4096..3 * 4096,
        5000..data.len(),
        0..data.len(),
    ] {
        assert_eq!(unmapped(0, r.clone()).as_deref(), Some(&data[r]));
    }
    assert_eq!(c.stats().hits, 6);
    let hl = header_len(data.len());
    let flip = |b: u64, at: usize| {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(c.path(&UUID, 0, b))
            .unwrap();
        let mut x = [0u8; 1];
        f.read_exact_at(&mut x, at as u64).unwrap();
        f.write_all_at(&[x[0] ^ 1], at as u64).unwrap();
    };
    // A byte of page 1: ranges clear of it still read; one that touches it fails.
    flip(1, hl + 4096 + 9);
    assert_eq!(unmapped(1, 0..4096).as_deref(), Some(&data[..4096]));
    assert_eq!(unmapped(1, 4000..4100), None);
    assert!(!c.path(&UUID, 0, 1).exists());
    // A byte of the header's magic.
    flip(2, 1);
    assert_eq!(unmapped(2, 0..10), None);
    // A file cut short: its last page is gone.
    let f = OpenOptions::new()
        .write(true)
        .open(c.path(&UUID, 0, 3))
        .unwrap();
    f.set_len((hl + 3 * 4096) as u64).unwrap();
    assert_eq!(unmapped(3, 3 * 4096..data.len()), None);
    let s = c.stats();
    assert_eq!((s.hits, s.corrupt, s.misses), (7, 3, 3), "{s:?}");
    assert_eq!(s.last_error, None);
}

#[test]
fn fills_past_the_bound_evict_the_least_recently_used() {
    let d = tempfile::tempdir().unwrap();
    let block = 4096u64;
    let one = block + header_len(block as usize) as u64;
    let c = BlockCache::open(d.path(), 10 * one, block).unwrap();
    let data = bytes(block as usize, 3);
    let t0 = SystemTime::now() - Duration::from_secs(1000);
    for b in 0..10u64 {
        c.fill(&UUID, 0, b, &data);
        // Distinct ages, oldest first, without sleeping.
        File::open(c.path(&UUID, 0, b))
            .unwrap()
            .set_modified(t0 + Duration::from_secs(b))
            .unwrap();
    }
    assert_eq!(c.stats().evicted, 0);
    // A hit on block 0 makes it the most recent; a second one, moments later, leaves that time.
    assert!(read_all(&c, 0, 0, data.len(), 0..1).is_some());
    let mtime = |b: u64| {
        fs::metadata(c.path(&UUID, 0, b))
            .unwrap()
            .modified()
            .unwrap()
    };
    let touched = mtime(0);
    assert!(touched > t0 + Duration::from_secs(100));
    let pinned = SystemTime::now() - Duration::from_secs(5);
    File::open(c.path(&UUID, 0, 0))
        .unwrap()
        .set_modified(pinned)
        .unwrap();
    assert!(read_all(&c, 0, 0, data.len(), 0..1).is_some());
    assert_eq!(mtime(0), pinned);
    c.fill(&UUID, 0, 10, &data);
    // 11 blocks > 10: down to 9 (90 %), the two oldest unread ones gone.
    assert_eq!(c.stats().evicted, 2);
    assert!(c.path(&UUID, 0, 0).exists());
    assert!(!c.path(&UUID, 0, 1).exists() && !c.path(&UUID, 0, 2).exists());
    let count = fs::read(d.path().join(".size")).unwrap();
    assert_eq!(u64::from_le_bytes(count[..8].try_into().unwrap()), 9 * one);
}

#[test]
fn a_block_size_off_the_page_is_refused() {
    let d = tempfile::tempdir().unwrap();
    assert!(BlockCache::open(d.path(), 1 << 20, 1000).is_err());
    assert!(BlockCache::open(d.path(), 1 << 20, 0).is_err());
}

/// However many blocks one gather maps at once, the store's snapshot holds at most `MAPPED` maps,
/// and the blocks left out still read (through `read`).
#[test]
fn a_snapshot_holds_at_most_mapped_blocks() {
    let d = tempfile::tempdir().unwrap();
    let c = BlockCache::open(d.path(), 1 << 30, 4096).unwrap();
    let data = bytes(4096, 6);
    let n = MAPPED as u64 + 100;
    for b in 0..n {
        c.fill(&UUID, 0, b, &data);
    }
    let want: Vec<(u32, u64, usize)> = (0..n).map(|b| (0, b, data.len())).collect();
    let snap = c.map_blocks(&UUID, &want);
    assert_eq!(snap.0.len(), MAPPED);
    // Another run's blocks: half the others make room.
    let more: Vec<(u32, u64, usize)> = (n..n + 10)
        .map(|b| {
            c.fill(&UUID, 0, b, &data);
            (0, b, data.len())
        })
        .collect();
    let snap = c.map_blocks(&UUID, &more);
    assert!(snap.0.len() <= MAPPED, "{}", snap.0.len());
    assert!((n..n + 10).all(|b| snap.get(&UUID, 0, b).is_some()));
    let left_out = (0..n).find(|&b| snap.get(&UUID, 0, b).is_none()).unwrap();
    let mut dst = vec![0u8; 10];
    assert!(c.read(&UUID, 0, left_out, data.len(), 0..10, &mut dst, true));
    assert_eq!(dst, data[..10]);
}

#[test]
fn a_block_the_cache_cannot_write_is_a_miss_with_its_error_kept_and_nothing_left_behind() {
    // What a full or broken cache disk does to a fill: the write fails. Here the container's
    // directory is taken by a plain file, so creating the block's directory fails the same way
    // for any user (root included, unlike a read-only directory).
    let d = tempfile::tempdir().unwrap();
    let c = BlockCache::open(d.path(), 1 << 30, 4 * 4096).unwrap();
    let blocker = d.path().join(hex(&UUID));
    std::fs::write(&blocker, b"not a directory").unwrap();
    let data = bytes(4 * 4096, 3);
    c.fill(&UUID, 0, 0, &data);
    // The read is a miss (the caller fetches the bytes), not an error, and the first error is
    // kept with the path it concerns.
    assert_eq!(read_all(&c, 0, 0, data.len(), 0..10), None);
    let s = c.stats();
    assert_eq!(s.fills, 0);
    let why = s.last_error.expect("the failed fill is noted");
    assert!(
        why.starts_with("fill ") && why.contains(&hex(&UUID)),
        "{why}"
    );
    // Nothing was written for it, and the cache's size count did not move.
    assert_eq!(std::fs::read(&blocker).unwrap(), b"not a directory");
    let size = std::fs::read(d.path().join(".size")).unwrap_or_default();
    assert!(size.iter().all(|&b| b == 0), "{size:?}");
    // Once the disk has room again (the blocker gone), the same block fills and reads back.
    std::fs::remove_file(&blocker).unwrap();
    c.fill(&UUID, 0, 0, &data);
    assert_eq!(read_all(&c, 0, 0, data.len(), 0..data.len()), Some(data));
    assert_eq!(c.stats().fills, 1);
}

/// Maps in this process of deleted block files under `dir` (`/proc/self/maps`): what keeps an
/// evicted block's disk space.
fn deleted_maps(dir: &Path) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let dir = dir.to_string_lossy();
    maps.lines()
        .filter(|l| l.contains(dir.as_ref()) && l.contains(".blk") && l.ends_with("(deleted)"))
        .count()
}

/// Blocks one store maps and another evicts (as another process would, sharing the directory)
/// stop holding disk space at the first store's next gather: its snapshot drops their maps.
#[test]
fn a_store_drops_its_maps_of_blocks_another_evicts() {
    let d = tempfile::tempdir().unwrap();
    let block = 4096u64;
    let data = bytes(block as usize, 9);
    let one = (header_len(data.len()) + data.len()) as u64;
    // Room for 8 blocks; eviction leaves at most 90 % of it.
    let a = BlockCache::open_rechecking(d.path(), 8 * one, block).unwrap();
    let b = BlockCache::open(d.path(), 8 * one, block).unwrap();
    let want: Vec<(u32, u64, usize)> = (0..6).map(|k| (0, k, data.len())).collect();
    let old = SystemTime::now() - Duration::from_secs(600);
    for &(_, k, _) in &want {
        a.fill(&UUID, 0, k, &data);
        // Least recently used, whatever the file system's clock granularity.
        File::options()
            .write(true)
            .open(a.path(&UUID, 0, k))
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    drop(a.map_blocks(&UUID, &want));
    assert_eq!(a.held().0.len(), 6);
    assert_eq!(deleted_maps(d.path()), 0);
    // The other store fills 6 blocks of its own: the least recently used (the first store's)
    // are evicted while mapped.
    for k in 0..6 {
        b.fill(&UUID, 1, k, &data);
    }
    assert!(b.stats().evicted > 0);
    let evicted: Vec<u64> = (0..6).filter(|&k| !a.path(&UUID, 0, k).exists()).collect();
    assert!(!evicted.is_empty());
    // The first store's next gather takes a snapshot without them, and their maps are gone.
    let snap = a.held();
    for &k in &evicted {
        assert!(snap.get(&UUID, 0, k).is_none(), "block {k}");
    }
    assert_eq!(snap.0.len(), 6 - evicted.len());
    assert_eq!(deleted_maps(d.path()), 0);
}
