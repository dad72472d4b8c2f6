//! Pooled allocator: reuse, the aggregate bound, shared pool across views, view-local classes, stats.

mod common;

use std::sync::Arc;

use loaderx::{LARGE_CLASS_BYTES, PooledAllocator, size_class};
use zrecord::{Allocator, DenseStore, Device, DeviceType};

#[test]
fn a_dropped_allocation_returns_to_the_pool_and_is_reused() {
    let a = PooledAllocator::new(1 << 20);
    let mut x = a.acquire(10_000, 64).unwrap();
    assert_eq!(x.len(), 10_000);
    assert_eq!(x.capacity(), size_class(10_000));
    assert_eq!(x.device(), Device::CPU);
    assert_eq!(x.device().kind, DeviceType::Cpu);
    assert_eq!(x.as_ptr() as usize % 64, 0);
    x.host_slice_mut().unwrap()[9_999] = 5;
    let p = x.as_ptr();
    let s = a.pool_stats();
    assert_eq!(
        (s.hits, s.misses, s.live_allocations, s.bytes_retained),
        (0, 1, 1, 0)
    );
    assert_eq!(s.live_bytes, size_class(10_000) as u64);
    drop(x);
    let s = a.pool_stats();
    assert_eq!(
        (s.live_allocations, s.bytes_retained),
        (0, size_class(10_000) as u64)
    );
    // Same class (a slightly different size) comes back from the pool: same region.
    let y = a.acquire(9_990, 8).unwrap();
    assert_eq!(y.as_ptr(), p);
    assert_eq!(y.len(), 9_990);
    let s = a.pool_stats();
    assert_eq!(
        (s.hits, s.misses, s.live_allocations, s.bytes_retained),
        (1, 1, 1, 0)
    );
    assert_eq!(a.stats(), Some(s));
}

#[test]
fn zero_bytes_and_bad_alignment() {
    let a = PooledAllocator::default();
    assert_eq!(a.pool_size(), 256 << 20);
    let e = a.acquire(0, 16).unwrap();
    assert!(e.is_empty());
    assert_eq!(a.pool_stats().live_allocations, 0);
    assert!(a.acquire(64, 3).is_err());
    let big = a.acquire(100, 4096).unwrap();
    assert_eq!(big.as_ptr() as usize % 4096, 0);
}

#[test]
fn retained_bytes_never_exceed_pool_size_and_overflow_is_freed() {
    let class = size_class(100_000) as u64;
    let a = PooledAllocator::new(3 * class);
    let live: Vec<_> = (0..5).map(|_| a.acquire(100_000, 64).unwrap()).collect();
    assert_eq!(a.pool_stats().live_allocations, 5);
    assert_eq!(a.pool_stats().peak_live_allocations, 5);
    drop(live);
    let s = a.pool_stats();
    assert_eq!(s.live_allocations, 0);
    assert_eq!(s.bytes_retained, 3 * class);
    // Three come back from the pool, the next two are fresh.
    let again: Vec<_> = (0..5).map(|_| a.acquire(100_000, 64).unwrap()).collect();
    let s = a.pool_stats();
    assert_eq!((s.hits, s.misses), (3, 7));
    assert_eq!(s.bytes_retained, 0);
    drop(again);
    // A request larger than the whole pool is never retained.
    drop(a.acquire(4 * class as usize, 64).unwrap());
    assert_eq!(a.pool_stats().bytes_retained, 3 * class);
    a.trim();
    assert_eq!(a.pool_stats().bytes_retained, 0);
}

#[test]
fn views_share_one_pool() {
    let a = PooledAllocator::new(1 << 20);
    let v1 = a.bind_view().unwrap();
    let v2 = a.bind_view().unwrap();
    let x = v1.acquire(5000, 64).unwrap();
    let p = x.as_ptr();
    drop(x);
    let y = v2.acquire(5000, 64).unwrap();
    assert_eq!(
        y.as_ptr(),
        p,
        "a region released through one view is reused by another"
    );
    let s = a.pool_stats();
    assert_eq!((s.hits, s.misses), (1, 1));
    assert_eq!(v1.stats(), Some(s));
}

#[test]
fn a_view_reuses_its_own_recent_larger_class_for_varying_sizes() {
    let a = PooledAllocator::new(1 << 24);
    let view = a.bind_view().unwrap();
    // A ragged-like view: sizes vary a little around 200 KB.
    let big = view.acquire(230_000, 64).unwrap();
    let p = big.as_ptr();
    drop(big);
    // A smaller class that has no idle region: the view's recent larger class serves it.
    let small = view.acquire(200_000, 64).unwrap();
    assert_ne!(size_class(200_000), size_class(230_000));
    assert_eq!(small.as_ptr(), p);
    assert_eq!(small.capacity(), size_class(230_000));
    assert_eq!(a.pool_stats().hits, 1);
    drop(small);
    // Another view that never used that class does not borrow it.
    let other = a.bind_view().unwrap();
    let o = other.acquire(200_000, 64).unwrap();
    assert_ne!(o.as_ptr(), p);
    assert_eq!(a.pool_stats().misses, 2);
    // Nor does a request more than one octave smaller.
    let tiny = view.acquire(100_000, 64).unwrap();
    assert_ne!(tiny.as_ptr(), p);
}

#[test]
fn a_full_pool_evicts_classes_no_live_view_uses() {
    let c_old = size_class(300_000) as u64;
    let c_new = size_class(200_000) as u64;
    let a = PooledAllocator::new(c_old + c_new / 2);
    {
        let old_view = a.bind_view().unwrap();
        drop(old_view.acquire(300_000, 64).unwrap());
    }
    assert_eq!(a.pool_stats().bytes_retained, c_old);
    // The view that used the old class is gone; a new view's release does not fit next to it, so the
    // stale region is evicted instead of the new one being freed.
    let new_view = a.bind_view().unwrap();
    let x = new_view.acquire(200_000, 64).unwrap();
    let p = x.as_ptr();
    drop(x);
    assert_eq!(a.pool_stats().bytes_retained, c_new);
    assert_eq!(new_view.acquire(200_000, 64).unwrap().as_ptr(), p);

    // While a view still uses a class, its idle regions are kept and the overflow is freed.
    let b = PooledAllocator::new(c_old + c_new / 2);
    let keeper = b.bind_view().unwrap();
    drop(keeper.acquire(300_000, 64).unwrap());
    let other = b.bind_view().unwrap();
    drop(other.acquire(200_000, 64).unwrap());
    assert_eq!(b.pool_stats().bytes_retained, c_old);
}

#[test]
fn concurrent_use_keeps_the_counters_consistent() {
    let a = PooledAllocator::new(4 << 20);
    std::thread::scope(|s| {
        for t in 0..4 {
            let view = a.bind_view().unwrap();
            s.spawn(move || {
                let mut held = Vec::new();
                for i in 0..2000usize {
                    held.push(view.acquire(1000 + (i * 7919 + t) % 300_000, 64).unwrap());
                    if held.len() > 5 {
                        held.remove(i % 5);
                    }
                }
            });
        }
    });
    let s = a.pool_stats();
    assert_eq!(s.live_allocations, 0);
    assert_eq!(s.live_bytes, 0);
    assert!(s.bytes_retained <= s.pool_size);
    assert_eq!(s.hits + s.misses, 8000);
    assert!(s.hits > 0);
    assert!(s.peak_live_allocations <= 24);
}

#[test]
fn store_gathers_recycle_through_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::dense_index_store(dir.path(), "d", 1000, 31);
    let a = PooledAllocator::new(1 << 20);
    let alloc: Arc<dyn Allocator> = Arc::new(a.clone());
    let view = DenseStore::open(&path).unwrap().bind(alloc);
    let idx: Vec<u64> = (0..64).map(|i| i * 7 % 1000).collect();
    for round in 0..10 {
        let b = view.gather(&idx).unwrap();
        assert_eq!(common::dense_ids(b.bytes(), 256), idx);
        assert_eq!(b.allocation().len(), 64 * 256);
        assert_eq!(a.pool_stats().live_allocations, 1, "round {round}");
    }
    let s = a.pool_stats();
    assert_eq!((s.misses, s.hits), (1, 9));
    assert_eq!(
        a.recent_classes(),
        Vec::<usize>::new(),
        "the store bound its own view handle"
    );
}

#[test]
fn large_ragged_batches_of_varying_size_reuse_one_region() {
    // Sizes spread over more than an octave, all above the large-region threshold: the first is a
    // miss, every later one reuses the same (power-of-two, lazily committed) region.
    let a = PooledAllocator::new(256 << 20);
    let base = LARGE_CLASS_BYTES;
    let sizes = [
        base + 3,
        base * 3 / 2,
        base + 12_345,
        base * 2 - 1,
        base + 1,
    ];
    let mut first = None;
    for (k, &bytes) in sizes.iter().enumerate() {
        let x = a.acquire(bytes, 64).unwrap();
        assert_eq!(x.len(), bytes);
        assert_eq!(x.capacity(), 2 * base, "power-of-two class for {bytes}");
        let p = x.as_ptr() as usize;
        assert_eq!(*first.get_or_insert(p), p, "batch {k} reused the region");
        drop(x);
        let s = a.pool_stats();
        // Counted by the high-water mark of the bytes handed out, not by the capacity.
        let mark = sizes[..=k].iter().max().unwrap().next_multiple_of(4096) as u64;
        assert_eq!(s.bytes_retained, mark, "batch {k}");
    }
    let s = a.pool_stats();
    assert_eq!((s.misses, s.hits), (1, sizes.len() as u64 - 1));
    // A small request never takes the large region.
    drop(a.acquire(1 << 20, 64).unwrap());
    assert_eq!(a.pool_stats().misses, 2);
    a.trim();
    assert_eq!(a.pool_stats().bytes_retained, 0);
}

#[test]
fn one_large_region_beyond_the_bound_is_kept_as_the_spare() {
    let a = PooledAllocator::new(1 << 20);
    let big = LARGE_CLASS_BYTES + 5;
    drop(a.acquire(big, 64).unwrap());
    let s = a.pool_stats();
    assert_eq!(s.misses, 1);
    // Not in the bounded pool (it does not fit) ...
    assert_eq!(s.bytes_retained, 0);
    // ... but the next large request of the band takes it.
    let x = a.acquire(LARGE_CLASS_BYTES * 3 / 2, 64).unwrap();
    assert_eq!(a.pool_stats().hits, 1);
    // Two live large regions released: only one spare is kept, the other is freed.
    let y = a.acquire(big, 64).unwrap();
    assert_eq!(a.pool_stats().misses, 2);
    drop(x);
    drop(y);
    let z1 = a.acquire(big, 64).unwrap();
    let z2 = a.acquire(big, 64).unwrap();
    let s = a.pool_stats();
    assert_eq!((s.hits, s.misses), (2, 3));
    assert_eq!(s.live_allocations, 2);
    drop((z1, z2));
    assert!(a.pool_stats().bytes_retained <= a.pool_size());
}
