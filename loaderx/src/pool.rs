//! A bounded, size-classed pool of regions behind the [`zrecord::Allocator`] contract.
//!
//! * Every request is rounded up to a **size class** (64-byte granules below 4 KiB, otherwise eight
//!   classes per power of two, so a region wastes at most 12.5 % of its size) and to an alignment of at
//!   least 64 bytes.
//! * A dropped [`Allocation`] returns its region to the pool's idle list for its class. Idle regions
//!   are kept up to `pool_size` bytes **in aggregate** for the allocator and every view bound to it; a
//!   release that would exceed the bound first evicts idle regions of classes no live view has used
//!   recently, and if it still does not fit, the released region is freed.
//! * A request served from an idle list is a **hit**; one that needs a fresh region is a **miss**.
//! * Each view (one per `store.bind(allocator)`, through [`Allocator::bind_view`]) remembers its last
//!   [`RECENT_CLASSES`] size classes. That buys two things a pool-wide policy cannot see:
//!   1. *Fallback reuse for varying sizes.* A ragged view asks for a slightly different size every
//!      batch; on an exact-class miss it takes an idle region of a larger class it has itself used
//!      recently (at most one power of two larger), instead of allocating fresh.
//!   2. *Stale-class eviction.* When the pool is full, idle regions of classes that no live view has
//!      requested recently (e.g. after a batch-size change, or from a dropped view) are freed first, so
//!      the bounded pool keeps what the current workload will ask for again.
//!
//! * **Large regions** (requests of at least [`LARGE_CLASS_BYTES`] from a source whose pages are
//!   committed only when written, [`RegionSource::lazy_pages`]: the host source's mapped regions) get
//!   a power-of-two class, and a request may take any idle large region up to [`LARGE_FALLBACK`]
//!   times its class, whichever view used it. Rounding up costs address space, not memory: such a
//!   region is counted against the bound by the bytes ever written to it (its high-water mark,
//!   rounded up to 4 KiB pages; with transparent huge pages the kernel may back up to 2 MiB more),
//!   not by its capacity. So ragged batches that differ in size every step (135-300 MB for 256
//!   photos) reuse one region and its already-faulted pages instead of faulting in a fresh one.
//! * **One spare large region** beyond the bound: a released large region that still does not fit
//!   after eviction (a single batch bigger than the pool) is kept as the spare, replacing and freeing
//!   any earlier spare. Idle memory is therefore at most `pool_size` plus one large region, the size
//!   of the largest batch the workload held live anyway.
//!
//! Regions come from a [`RegionSource`]; [`HostSource`] is the CPU one. A pinned-host or GPU source
//! plugs in through [`PooledAllocator::with_source`] without changing the pool or the stores.

use std::collections::HashMap;
use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use zrecord::{AllocStats, Allocation, Allocator, Device, RegionHome};

/// Default aggregate bound on idle bytes: 256 MiB.
pub const DEFAULT_POOL_SIZE: u64 = 256 << 20;

/// How many recent size classes each view remembers.
pub const RECENT_CLASSES: usize = 8;

/// Requests of at least this many bytes from a lazily committed source get power-of-two classes
/// (64 MiB; the host source maps every region of [`zrecord::MAPPED_REGION_BYTES`] or more).
pub const LARGE_CLASS_BYTES: usize = 64 << 20;

/// A large request may take an idle large region of up to this many times its class.
pub const LARGE_FALLBACK: usize = 4;

/// Page granularity of the written-bytes accounting of large regions.
const PAGE: usize = 4096;

/// Minimum alignment of pooled regions (so regions of one class are interchangeable across requests).
const MIN_ALIGN: usize = 64;

/// Where fresh regions come from and where overflow goes. Implementations: [`HostSource`] (CPU),
/// and with the `cuda` feature `cuda::PinnedSource` (page-locked host memory) and
/// `cuda::DeviceSource` (device memory).
///
/// # Safety
///
/// The pool wraps every region it gets from [`alloc`](Self::alloc) in an [`Allocation`] stamped
/// with [`device`](Self::device), and hands it to safe code: when that placement is
/// host-accessible ([`zrecord::DeviceType::host_accessible`]), `Allocation::host_slice` and
/// `host_slice_mut` read and write the region through the CPU, from any thread, for as long as
/// the allocation lives, and the pool hands the same region out again after it comes back. An
/// implementation guarantees, for every `Ok(ptr)` that `alloc(capacity, align)` returns:
///
/// 1. **Size and alignment.** `ptr` starts at least `capacity` bytes aligned to `align` (a power
///    of two). A source that cannot give that alignment returns an error, never a less-aligned
///    region.
/// 2. **Exclusive until freed.** The region overlaps no other live region, and it stays
///    allocated (the source does not free, move or reuse it, and keeps alive whatever it depends
///    on, such as a driver context) until [`free`](Self::free) is called with the same
///    `(ptr, capacity, align)`.
/// 3. **Host memory is initialised.** When `device().kind.host_accessible()`, every byte of the
///    region is readable and writable by the CPU and initialised (zeroed, say) when `alloc`
///    returns, so that a `&[u8]` over it is valid before anything is written. A region of a
///    placement the CPU cannot address may hold anything and need not be addressable by the CPU
///    at all: an [`Allocation`] on such a placement never gives out a slice of it.
/// 4. **Any thread.** The region may be used and freed from any thread (the pool moves regions
///    between threads with their allocations).
/// 5. **One placement.** `device()` returns the same value on every call: each allocation is
///    stamped with it when it is handed out, so a region allocated as device memory is never
///    presented as host memory.
///
/// Every `SAFETY` comment of the pool that relies on a region's properties cites this contract.
pub unsafe trait RegionSource: Send + Sync + fmt::Debug {
    /// The placement of every region.
    fn device(&self) -> Device;

    /// A fresh region of exactly `capacity > 0` bytes aligned to `align`.
    fn alloc(&self, capacity: usize, align: usize) -> zrecord::Result<NonNull<u8>>;

    /// Frees a region.
    ///
    /// # Safety
    /// `ptr` must come from `self.alloc(capacity, align)` and not be used afterwards.
    unsafe fn free(&self, ptr: NonNull<u8>, capacity: usize, align: usize);

    /// Whether a fresh region of `capacity` bytes aligned to `align` takes physical memory only
    /// where it is written (an anonymous mapping). The pool then rounds such requests up to a
    /// power of two and counts a region by its written bytes. The default is `false` (device and
    /// page-locked memory is committed whole).
    fn lazy_pages(&self, capacity: usize, align: usize) -> bool {
        let _ = (capacity, align);
        false
    }
}

/// Ordinary host memory from the global allocator (zeroed on first allocation).
#[derive(Debug, Default, Clone, Copy)]
pub struct HostSource;

// SAFETY: the `RegionSource` contract: `alloc_host_region(capacity, align)` returns a zeroed
// region of `capacity` bytes aligned to `align` (or an error), from the global allocator or an
// anonymous mapping of its own, which nothing else uses or frees until `free_host_region` with
// the same arguments and which any thread may use; `device()` is always the CPU.
unsafe impl RegionSource for HostSource {
    fn device(&self) -> Device {
        Device::CPU
    }

    fn alloc(&self, capacity: usize, align: usize) -> zrecord::Result<NonNull<u8>> {
        zrecord::alloc_host_region(capacity, align)
    }

    unsafe fn free(&self, ptr: NonNull<u8>, capacity: usize, align: usize) {
        // SAFETY: forwarded contract: the region came from alloc_host_region(capacity, align).
        unsafe { zrecord::free_host_region(ptr, capacity, align) }
    }

    fn lazy_pages(&self, capacity: usize, align: usize) -> bool {
        zrecord::host_region_is_lazy(capacity, align)
    }
}

/// The size class (region capacity) a request of `bytes > 0` is served with.
pub fn size_class(bytes: usize) -> usize {
    const SMALL: usize = 4096;
    if bytes <= SMALL {
        return bytes.div_ceil(64) * 64;
    }
    // Eight classes per octave: granule = 2^(floor(log2(bytes)) - 3), waste < 1/8 of the region.
    let log = usize::BITS - 1 - bytes.leading_zeros();
    let granule = 1usize << (log - 3);
    bytes.div_ceil(granule).saturating_mul(granule)
}

/// Idle regions are keyed by (class, alignment).
type Key = (usize, usize);

/// One idle region; the pointer is only ever touched by the thread that pops it under the lock.
struct Idle(NonNull<u8>);

// SAFETY: an idle region is exclusively owned by the pool (no Allocation refers to it), and a raw
// region can be handed between threads like a `Box<[u8]>`.
unsafe impl Send for Idle {}

#[derive(Default)]
struct PoolState {
    idle: HashMap<Key, Vec<Idle>>,
    /// High-water mark (bytes written, page-rounded) of every large region, live or idle, by address.
    written: HashMap<usize, usize>,
    /// The one large region kept beyond the bound.
    spare: Option<(Idle, Key)>,
    retained: u64,
    hits: u64,
    misses: u64,
    live: u64,
    live_bytes: u64,
    peak_live: u64,
}

/// Per-view memory of recent size classes (a small ring).
#[derive(Debug, Default)]
struct ViewState {
    recent: Mutex<Recent>,
}

#[derive(Debug, Default)]
struct Recent {
    keys: [Key; RECENT_CLASSES],
    len: usize,
    next: usize,
}

impl Recent {
    fn note(&mut self, key: Key) {
        if self.keys[..self.len].contains(&key) {
            return;
        }
        self.keys[self.next] = key;
        self.next = (self.next + 1) % RECENT_CLASSES;
        self.len = (self.len + 1).min(RECENT_CLASSES);
    }

    fn as_slice(&self) -> &[Key] {
        &self.keys[..self.len]
    }
}

struct Pool {
    source: Arc<dyn RegionSource>,
    pool_size: u64,
    state: Mutex<PoolState>,
    views: Mutex<Vec<Weak<ViewState>>>,
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("source", &self.source)
            .field("pool_size", &self.pool_size)
            .finish()
    }
}

impl Pool {
    fn stats(&self) -> AllocStats {
        let s = self.state.lock();
        AllocStats {
            bytes_retained: s.retained,
            pool_size: self.pool_size,
            hits: s.hits,
            misses: s.misses,
            live_allocations: s.live,
            live_bytes: s.live_bytes,
            peak_live_allocations: s.peak_live,
        }
    }

    /// Classes some live view used recently.
    fn recent_union(&self) -> Vec<Key> {
        let mut views = self.views.lock();
        views.retain(|w| w.strong_count() > 0);
        let mut keys = Vec::new();
        for v in views.iter().filter_map(Weak::upgrade) {
            keys.extend_from_slice(v.recent.lock().as_slice());
        }
        keys
    }

    /// What an idle region counts against the bound: its written bytes if large, else its capacity.
    fn weight(s: &PoolState, p: NonNull<u8>, cap: usize) -> u64 {
        s.written
            .get(&(p.as_ptr() as usize))
            .copied()
            .unwrap_or(cap) as u64
    }

    fn acquire(
        self: &Arc<Self>,
        view: &ViewState,
        bytes: usize,
        align: usize,
    ) -> zrecord::Result<Allocation> {
        let device = self.source.device();
        if !align.is_power_of_two() {
            return Err(zrecord::Error::InvalidInput(format!(
                "alignment {align} is not a power of two"
            )));
        }
        if bytes == 0 {
            return Ok(Allocation::empty(device, align));
        }
        let align = align.max(MIN_ALIGN);
        let pow2 = bytes.checked_next_power_of_two();
        let large = match pow2 {
            Some(c) => bytes >= LARGE_CLASS_BYTES && self.source.lazy_pages(c, align),
            None => false,
        };
        let class = match pow2 {
            Some(c) if large => c,
            _ => size_class(bytes),
        };
        let key = (class, align);
        let band = |(c, a): Key| large && a == align && c > class && c / LARGE_FALLBACK <= class;
        // Fallback classes: larger classes this view used recently, at most one octave up.
        let fallback: Vec<Key> = {
            let mut r = view.recent.lock();
            r.note(key);
            let mut f: Vec<Key> = r
                .as_slice()
                .iter()
                .copied()
                .filter(|&(c, a)| a == align && c > class && c <= class.saturating_mul(2))
                .collect();
            f.sort_unstable();
            f
        };
        let popped = {
            let mut s = self.state.lock();
            let mut got = s.idle.get_mut(&key).and_then(Vec::pop).map(|p| (p, class));
            if got.is_none() {
                for &(c, a) in &fallback {
                    if let Some(p) = s.idle.get_mut(&(c, a)).and_then(Vec::pop) {
                        got = Some((p, c));
                        break;
                    }
                }
            }
            if got.is_none() && large {
                // Any idle large region in the band, smallest first, whichever view used it.
                let mut near: Vec<Key> = s
                    .idle
                    .iter()
                    .filter(|&(&k, list)| band(k) && !list.is_empty())
                    .map(|(&k, _)| k)
                    .collect();
                near.sort_unstable();
                if let Some(&(c, a)) = near.first() {
                    got = s.idle.get_mut(&(c, a)).and_then(Vec::pop).map(|p| (p, c));
                }
            }
            let mut from_spare = false;
            if got.is_none() && s.spare.as_ref().is_some_and(|&(_, k)| k == key || band(k)) {
                got = s.spare.take().map(|(p, (c, _))| (p, c));
                from_spare = true;
            }
            match got {
                Some((Idle(p), cap)) => {
                    s.hits += 1;
                    if !from_spare {
                        s.retained -= Self::weight(&s, p, cap);
                    }
                    Self::count_live(&mut s, cap);
                }
                None => s.misses += 1,
            }
            got
        };
        let (ptr, cap) = match popped {
            Some((Idle(p), cap)) => (p, cap),
            None => {
                let p = self.source.alloc(class, align)?;
                Self::count_live(&mut self.state.lock(), class);
                (p, class)
            }
        };
        if large {
            // The caller writes the whole `bytes` (a gather fills its output): raise the mark.
            let mut s = self.state.lock();
            let mark = s.written.entry(ptr.as_ptr() as usize).or_insert(0);
            *mark = (*mark).max(bytes.next_multiple_of(PAGE).min(cap));
        }
        let home: Arc<dyn RegionHome> = self.clone();
        // SAFETY: by `RegionSource`'s contract `ptr` is a region of `cap >= bytes` bytes aligned to
        // `align` (the source allocated it with `(cap, align)`, fresh or earlier), valid and owned
        // by this pool alone until it frees it (fresh, or idle and owned by nobody else), usable
        // from any thread, and, when `device` (the source's one placement) is host-accessible,
        // CPU-readable and initialized (initialized on allocation, and only ever written since);
        // it is released back through this pool with the same (cap, align).
        Ok(unsafe { Allocation::from_raw_parts(ptr, bytes, cap, align, device, Some(home)) })
    }

    fn count_live(s: &mut PoolState, cap: usize) {
        s.live += 1;
        s.live_bytes += cap as u64;
        s.peak_live = s.peak_live.max(s.live);
    }
}

impl RegionHome for Pool {
    unsafe fn release(&self, ptr: NonNull<u8>, len: usize, align: usize) {
        let cap = len as u64;
        let key = (len, align);
        let mut to_free: Vec<(Idle, Key)> = Vec::new();
        {
            let mut s = self.state.lock();
            s.live -= 1;
            s.live_bytes -= cap;
            let w = Self::weight(&s, ptr, len);
            let large = s.written.contains_key(&(ptr.as_ptr() as usize));
            if s.retained + w > self.pool_size && w <= self.pool_size {
                // Over the bound: evict idle regions of classes no live view used recently.
                drop(s);
                let keep = self.recent_union();
                s = self.state.lock();
                let st = &mut *s;
                let stale: Vec<Key> = st
                    .idle
                    .keys()
                    .copied()
                    .filter(|k| !keep.contains(k))
                    .collect();
                for k in stale {
                    if let Some(list) = st.idle.get_mut(&k) {
                        while st.retained + w > self.pool_size {
                            let Some(p) = list.pop() else { break };
                            let addr = p.0.as_ptr() as usize;
                            st.retained -= st.written.get(&addr).copied().unwrap_or(k.0) as u64;
                            to_free.push((p, k));
                        }
                    }
                }
            }
            if s.retained + w <= self.pool_size {
                s.retained += w;
                s.idle.entry(key).or_default().push(Idle(ptr));
            } else if large {
                // Too big for what is left of the bound: the spare, replacing an older one.
                if let Some(old) = s.spare.replace((Idle(ptr), key)) {
                    to_free.push(old);
                }
            } else {
                to_free.push((Idle(ptr), key));
            }
            for (p, _) in &to_free {
                s.written.remove(&(p.0.as_ptr() as usize));
            }
        }
        for (Idle(p), (c, a)) in to_free {
            // SAFETY: each region came from this pool's source with (c, a) (idle entries are keyed by
            // the exact capacity and alignment they were allocated with; the released one by the
            // caller's contract) and nothing refers to it any more.
            unsafe { self.source.free(p, c, a) };
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let state = self.state.get_mut();
        let mut idle = std::mem::take(&mut state.idle);
        if let Some((p, k)) = state.spare.take() {
            idle.entry(k).or_default().push(p);
        }
        for ((c, a), list) in idle {
            for Idle(p) in list {
                // SAFETY: idle regions came from this source with (c, a); the pool is the last owner.
                unsafe { self.source.free(p, c, a) };
            }
        }
    }
}

/// A bounded pooled allocator. Cloning shares the pool; [`Allocator::bind_view`] hands each bound
/// view its own handle (with its own recent size classes) over the same pool.
#[derive(Debug, Clone)]
pub struct PooledAllocator {
    pool: Arc<Pool>,
    view: Arc<ViewState>,
}

impl Default for PooledAllocator {
    fn default() -> Self {
        Self::new(DEFAULT_POOL_SIZE)
    }
}

impl PooledAllocator {
    /// A CPU pool retaining at most `pool_size` idle bytes.
    pub fn new(pool_size: u64) -> Self {
        Self::with_source(Arc::new(HostSource), pool_size)
    }

    /// A pool over any region source (pinned host, device memory, ...).
    pub fn with_source(source: Arc<dyn RegionSource>, pool_size: u64) -> Self {
        let pool = Arc::new(Pool {
            source,
            pool_size,
            state: Mutex::new(PoolState::default()),
            views: Mutex::new(Vec::new()),
        });
        let view = Arc::new(ViewState::default());
        pool.views.lock().push(Arc::downgrade(&view));
        PooledAllocator { pool, view }
    }

    /// The aggregate bound on idle bytes.
    pub fn pool_size(&self) -> u64 {
        self.pool.pool_size
    }

    /// Current counters (same as [`Allocator::stats`], without the `Option`).
    pub fn pool_stats(&self) -> AllocStats {
        self.pool.stats()
    }

    /// The size classes this handle requested most recently (oldest first is not guaranteed).
    pub fn recent_classes(&self) -> Vec<usize> {
        self.view
            .recent
            .lock()
            .as_slice()
            .iter()
            .map(|k| k.0)
            .collect()
    }

    /// Frees every idle region now (live allocations are untouched and still return to the pool).
    pub fn trim(&self) {
        let idle = {
            let mut s = self.pool.state.lock();
            s.retained = 0;
            let mut idle = std::mem::take(&mut s.idle);
            if let Some((p, k)) = s.spare.take() {
                idle.entry(k).or_default().push(p);
            }
            for p in idle.values().flatten() {
                s.written.remove(&(p.0.as_ptr() as usize));
            }
            idle
        };
        for ((c, a), list) in idle {
            for Idle(p) in list {
                // SAFETY: idle regions came from this source with (c, a) and are owned by nobody.
                unsafe { self.pool.source.free(p, c, a) };
            }
        }
    }
}

impl Allocator for PooledAllocator {
    fn device(&self) -> Device {
        self.pool.source.device()
    }

    fn acquire(&self, bytes: usize, align: usize) -> zrecord::Result<Allocation> {
        self.pool.acquire(&self.view, bytes, align)
    }

    fn bind_view(&self) -> Option<Arc<dyn Allocator>> {
        let view = Arc::new(ViewState::default());
        self.pool.views.lock().push(Arc::downgrade(&view));
        Some(Arc::new(PooledAllocator {
            pool: self.pool.clone(),
            view,
        }))
    }

    fn stats(&self) -> Option<AllocStats> {
        Some(self.pool.stats())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_waste_at_most_an_eighth() {
        let mut prev = 0;
        for bytes in (1..300_000usize)
            .step_by(37)
            .chain([4096, 4097, 1 << 20, (1 << 20) + 1])
        {
            let c = size_class(bytes);
            assert!(c >= bytes);
            if bytes > 4096 {
                assert!((c - bytes) * 8 <= c, "bytes {bytes} class {c}");
            } else {
                assert!(c - bytes < 64);
            }
            if bytes > prev {
                assert!(c >= size_class(prev.max(1)));
            }
            prev = bytes;
        }
    }
}
