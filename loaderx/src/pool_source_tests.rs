//! Unit tests of the pool over a test double [`RegionSource`] standing in for device memory: the
//! pool policy (bound, hits, misses, frees) does not depend on where regions come from, and a
//! non-host placement never exposes its bytes to the CPU.

use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use zrecord::{Allocator, Device, DeviceType};

use crate::{PooledAllocator, RegionSource, size_class};

/// Counts allocations and frees; hands out host memory but reports a CUDA placement.
#[derive(Debug, Default)]
struct CountingSource {
    allocs: AtomicU64,
    frees: AtomicU64,
    freed_bytes: AtomicU64,
}

// SAFETY: the `RegionSource` contract: regions come from `alloc_host_region` (zeroed host memory
// of `capacity` bytes aligned to `align`, owned by the caller until `free_host_region`, usable
// from any thread); `device()` is always the same CUDA placement, which the CPU is never handed
// a slice of.
unsafe impl RegionSource for CountingSource {
    fn device(&self) -> Device {
        Device {
            kind: DeviceType::Cuda,
            id: 3,
        }
    }

    fn alloc(&self, capacity: usize, align: usize) -> zrecord::Result<NonNull<u8>> {
        self.allocs.fetch_add(1, Ordering::Relaxed);
        zrecord::alloc_host_region(capacity, align)
    }

    unsafe fn free(&self, ptr: NonNull<u8>, capacity: usize, align: usize) {
        self.frees.fetch_add(1, Ordering::Relaxed);
        self.freed_bytes
            .fetch_add(capacity as u64, Ordering::Relaxed);
        // SAFETY: forwarded contract: the region came from alloc_host_region(capacity, align).
        unsafe { zrecord::free_host_region(ptr, capacity, align) }
    }
}

#[test]
fn device_pool_reports_placement_and_hides_bytes() {
    let src = Arc::new(CountingSource::default());
    let pool = PooledAllocator::with_source(src.clone(), 1 << 20);
    let dev = Device {
        kind: DeviceType::Cuda,
        id: 3,
    };
    assert_eq!(pool.device(), dev);
    let mut a = pool.acquire(1000, 64).unwrap();
    assert_eq!(a.device(), dev);
    assert!(a.host_slice().is_none());
    assert!(a.host_slice_mut().is_none());
    assert_eq!(pool.acquire(0, 64).unwrap().device(), dev);
}

#[test]
fn bound_hits_and_frees_over_a_fake_source() {
    let src = Arc::new(CountingSource::default());
    let class = size_class(300_000) as u64;
    // Room for exactly two idle regions of this class.
    let pool = PooledAllocator::with_source(src.clone(), 2 * class);
    let live: Vec<_> = (0..3).map(|_| pool.acquire(300_000, 64).unwrap()).collect();
    let s = pool.pool_stats();
    assert_eq!((s.misses, s.hits, s.live_allocations), (3, 0, 3));
    assert_eq!(src.allocs.load(Ordering::Relaxed), 3);
    drop(live);
    let s = pool.pool_stats();
    assert_eq!(
        s.bytes_retained,
        2 * class,
        "two regions kept, at the bound"
    );
    assert_eq!(src.frees.load(Ordering::Relaxed), 1, "the third is freed");
    assert_eq!(s.live_allocations, 0);
    let again: Vec<_> = (0..2).map(|_| pool.acquire(290_000, 64).unwrap()).collect();
    let s = pool.pool_stats();
    assert_eq!(s.hits, 2);
    assert_eq!(
        src.allocs.load(Ordering::Relaxed),
        3,
        "served from idle regions"
    );
    drop(again);
    pool.trim();
    assert_eq!(pool.pool_stats().bytes_retained, 0);
    assert_eq!(src.frees.load(Ordering::Relaxed), 3);
    assert_eq!(src.freed_bytes.load(Ordering::Relaxed), 3 * class);
}

#[test]
fn pool_larger_than_bound_frees_on_release() {
    let src = Arc::new(CountingSource::default());
    let pool = PooledAllocator::with_source(src.clone(), 0);
    drop(pool.acquire(4096, 64).unwrap());
    assert_eq!(pool.pool_stats().bytes_retained, 0);
    assert_eq!(src.frees.load(Ordering::Relaxed), 1);
}
