//! The placement contract: where gathered batches are materialized.
//!
//! A store never returns memory it owns. Every gather computes the exact size of its output, asks the
//! view's [`Allocator`] for one region with [`Allocator::acquire`], fills it, and hands the
//! [`Allocation`] to the caller. The allocation carries its immutable [`Device`] and returns its
//! region to the allocator (its [`RegionHome`]) when dropped, which is how pooled allocators (in the
//! `loaderx` crate) recycle memory. [`SystemAllocator`] is the plain, pool-less CPU implementation.

use std::alloc::Layout;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::error::{Error, Result};

/// DLPack device types this contract knows about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeviceType {
    /// Ordinary host memory (`kDLCPU` = 1).
    Cpu,
    /// CUDA device memory (`kDLCUDA` = 2).
    Cuda,
    /// Page-locked host memory registered with CUDA (`kDLCUDAHost` = 3).
    CudaHost,
    /// ROCm device memory (`kDLROCM` = 10).
    Rocm,
    /// Page-locked host memory registered with ROCm (`kDLROCMHost` = 11).
    RocmHost,
}

impl DeviceType {
    /// The DLPack `DLDeviceType` code.
    pub const fn dlpack_code(self) -> i32 {
        match self {
            DeviceType::Cpu => 1,
            DeviceType::Cuda => 2,
            DeviceType::CudaHost => 3,
            DeviceType::Rocm => 10,
            DeviceType::RocmHost => 11,
        }
    }

    /// Whether the CPU can read and write this memory directly.
    pub const fn host_accessible(self) -> bool {
        matches!(
            self,
            DeviceType::Cpu | DeviceType::CudaHost | DeviceType::RocmHost
        )
    }
}

/// A placement: device type plus logical device id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Device {
    /// Device type.
    pub kind: DeviceType,
    /// Logical device id.
    pub id: i32,
}

impl Device {
    /// Host memory, device 0.
    pub const CPU: Device = Device {
        kind: DeviceType::Cpu,
        id: 0,
    };
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}:{}", self.kind, self.id)
    }
}

/// Counters an allocator may expose (pooled allocators do; tests and the harness read them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Bytes held in the idle pool right now.
    pub bytes_retained: u64,
    /// Bound on `bytes_retained`.
    pub pool_size: u64,
    /// Requests served from the pool.
    pub hits: u64,
    /// Requests that needed a fresh region.
    pub misses: u64,
    /// Allocations handed out and not yet dropped.
    pub live_allocations: u64,
    /// Bytes in live allocations (their region sizes).
    pub live_bytes: u64,
    /// Most simultaneously live allocations ever seen.
    pub peak_live_allocations: u64,
}

/// Where a region goes back to when its [`Allocation`] is dropped.
pub trait RegionHome: Send + Sync {
    /// Takes back a region.
    ///
    /// # Safety
    /// `ptr`, `len` and `align` must be exactly those of a region this home handed out, and nothing may
    /// use the region afterwards.
    unsafe fn release(&self, ptr: NonNull<u8>, len: usize, align: usize);
}

/// A source of writable regions for one placement.
pub trait Allocator: Send + Sync + fmt::Debug {
    /// The placement of every region this allocator hands out.
    fn device(&self) -> Device;

    /// An exclusive, writable region of at least `bytes` bytes aligned to `align` (a power of two).
    /// [`Allocation::len`] reports exactly `bytes`.
    fn acquire(&self, bytes: usize, align: usize) -> Result<Allocation>;

    /// Called once per `store.bind(allocator)`: an allocator that keeps per-view state (recent size
    /// classes) returns a view handle sharing its pool. `None` means "use the allocator itself".
    fn bind_view(&self) -> Option<Arc<dyn Allocator>> {
        None
    }

    /// Pool and live-allocation counters, if the allocator keeps them.
    fn stats(&self) -> Option<AllocStats> {
        None
    }
}

/// An exclusive region handed out by an [`Allocator`]. Dropping it returns the region to its home.
///
/// # Exported regions
/// An owner may hand the region's pointer ([`as_ptr`](Self::as_ptr)) to code outside Rust, e.g.
/// as a writable DLPack tensor, usually while sharing the `Allocation` itself (`Arc<Allocation>`)
/// among several such exports that alias it. Foreign code may then write the region at any time,
/// from any thread. From the moment of export until the last foreign user is gone, the exporter
/// must ensure that no Rust reference to the bytes exists: it must not call
/// [`host_slice`](Self::host_slice) (or [`host_slice_mut`](Self::host_slice_mut)) on that
/// allocation, and it reads or writes the region only through raw-pointer copies
/// (`ptr::copy_nonoverlapping` from `as_ptr`), never through a `&[u8]` another thread may write.
/// The pointer carries the region's full read-write permission, so such raw writes through a
/// shared allocation are allowed under the same rule.
pub struct Allocation {
    ptr: NonNull<u8>,
    len: usize,
    capacity: usize,
    align: usize,
    device: Device,
    home: Option<Arc<dyn RegionHome>>,
}

// SAFETY: an Allocation is the unique owner of its region (the allocator contract gives it
// exclusively) and its home is `Send + Sync`, so moving it to another thread is as safe as for
// `Vec<u8>`.
unsafe impl Send for Allocation {}
// SAFETY: through `&Allocation` safe code gets `&[u8]` (`host_slice`) and raw pointers; mutation of
// the bytes through a safe API needs `&mut Allocation`. The only other writes are foreign writes to
// an exported region, and the exporter's contract (see "Exported regions" above) forbids any
// `host_slice` borrow of such a region, so shared `&[u8]`s from any number of threads never
// observe a write; raw-pointer copies from several threads need no exclusivity.
unsafe impl Sync for Allocation {}

impl Allocation {
    /// Wraps a region. `len` is the logical size asked for; `capacity` the real region size that will be
    /// released. A zero-capacity allocation has no home and releases nothing.
    ///
    /// # Safety
    /// `ptr` must point to `capacity >= len` bytes aligned to `align`, exclusively owned by the caller,
    /// valid until `home.release(ptr, capacity, align)` is called; for host-accessible devices the bytes
    /// must be readable and writable by the CPU.
    pub unsafe fn from_raw_parts(
        ptr: NonNull<u8>,
        len: usize,
        capacity: usize,
        align: usize,
        device: Device,
        home: Option<Arc<dyn RegionHome>>,
    ) -> Self {
        debug_assert!(capacity >= len);
        Allocation {
            ptr,
            len,
            capacity,
            align,
            device,
            home,
        }
    }

    /// An empty allocation on `device` (no region behind it).
    pub fn empty(device: Device, align: usize) -> Self {
        let align = align.max(1);
        // A dangling, aligned, non-null pointer: never dereferenced for a zero-length region.
        let ptr = NonNull::new(align as *mut u8).unwrap_or(NonNull::dangling());
        Allocation {
            ptr,
            len: 0,
            capacity: 0,
            align,
            device,
            home: None,
        }
    }

    /// Logical size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the allocation holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size of the underlying region (a size class may round up).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Alignment of the region.
    pub fn align(&self) -> usize {
        self.align
    }

    /// The placement of this allocation.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Raw pointer to the first byte. It carries the region's read-write permission: an exporter
    /// may cast it to `*mut u8` and let foreign code write through it, or write through it itself,
    /// under the rules of "Exported regions" on [`Allocation`].
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Raw mutable pointer to the first byte.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The bytes, when the CPU can address them. Never call it on an exported region (see
    /// "Exported regions" on [`Allocation`]): foreign code may be writing it.
    pub fn host_slice(&self) -> Option<&[u8]> {
        if !self.device.kind.host_accessible() {
            return None;
        }
        // SAFETY: the region holds `len` initialized-or-written bytes owned exclusively by `self`
        // (from_raw_parts contract); regions are zeroed or fully written before being exposed.
        // Nothing writes them while this borrow lives: safe writes need `&mut self`, and an
        // exporter whose foreign users may write never calls this (the exported-regions rule).
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) })
    }

    /// The bytes, mutable, when the CPU can address them.
    pub fn host_slice_mut(&mut self) -> Option<&mut [u8]> {
        if !self.device.kind.host_accessible() {
            return None;
        }
        // SAFETY: as in `host_slice`, and `&mut self` guarantees exclusivity.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) })
    }

    pub(crate) fn host_slice_mut_or_err(&mut self) -> Result<&mut [u8]> {
        let dev = self.device;
        self.host_slice_mut()
            .ok_or_else(|| Error::Alloc(format!("placement {dev} is not host-accessible")))
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            // SAFETY: ptr/capacity/align are exactly the region the home handed out (from_raw_parts
            // contract) and `self` is its last user.
            unsafe { home.release(self.ptr, self.capacity, self.align) };
        }
    }
}

impl fmt::Debug for Allocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Allocation")
            .field("len", &self.len)
            .field("capacity", &self.capacity)
            .field("align", &self.align)
            .field("device", &self.device)
            .finish()
    }
}

/// Alignment the global allocator gives `calloc`-style zeroed allocations without an explicit
/// memset (glibc's `MALLOC_ALIGNMENT`). Larger alignments are produced by over-allocating.
const NATURAL_ALIGN: usize = 16;

/// Host regions of at least this many bytes are anonymous mappings of their own (4 MiB, where
/// a region holds two huge pages).
pub const MAPPED_REGION_BYTES: usize = 4 << 20;

/// Whether [`alloc_host_region`]`(capacity, align)` maps a region of its own, whose pages take
/// physical memory only once written. Such a region is advised `MADV_HUGEPAGE`, so a first write
/// faults in 2 MiB pages instead of 4 KiB ones where the kernel has transparent huge pages in
/// `madvise` or `always` mode (measured on a 270 MB ragged batch: 65,600 faults become ~440; on
/// a 38.5 MB dense batch ~9,400 become ~20). A pool may round such a region up generously:
/// untouched address space costs no memory.
pub fn host_region_is_lazy(capacity: usize, align: usize) -> bool {
    cfg!(target_os = "linux") && capacity >= MAPPED_REGION_BYTES && align <= 4096
}

#[cfg(target_os = "linux")]
fn map_region(capacity: usize) -> Result<NonNull<u8>> {
    // SAFETY: a private anonymous mapping at an address of the kernel's choosing touches no
    // existing memory; the result is checked for MAP_FAILED before use.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            capacity,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::Alloc(format!(
            "cannot map {capacity} bytes: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: advice on the mapping just created; a kernel without THP refuses it harmlessly.
    unsafe { libc::madvise(p, capacity, libc::MADV_HUGEPAGE) };
    NonNull::new(p.cast::<u8>()).ok_or_else(|| Error::Alloc("null mapping".into()))
}

/// # Safety
/// `ptr` must be a mapping of `capacity` bytes from `map_region`, not used afterwards.
#[cfg(target_os = "linux")]
unsafe fn unmap_region(ptr: NonNull<u8>, capacity: usize) {
    // SAFETY: the caller passes exactly a live mapping from map_region.
    unsafe { libc::munmap(ptr.as_ptr().cast(), capacity) };
}

#[cfg(not(target_os = "linux"))]
fn map_region(_capacity: usize) -> Result<NonNull<u8>> {
    Err(Error::Alloc("mapped regions are Linux-only".into()))
}

#[cfg(not(target_os = "linux"))]
unsafe fn unmap_region(_ptr: NonNull<u8>, _capacity: usize) {}

/// Allocates a zeroed region from the global allocator.
///
/// Alignments above 16 are obtained by over-allocating a 16-aligned zeroed block and rounding the
/// pointer up, instead of asking the allocator for the alignment: for large regions the system
/// then hands out fresh zero pages lazily (`calloc` on an `mmap`ed chunk), whereas an aligned
/// zeroed allocation memsets the whole region up front on the calling thread, which serialized
/// large parallel gathers (measured: a 36.8 MiB batch gathered at 1.7 GiB/s instead of 3 GiB/s
/// on 2 threads).
///
/// Regions of at least [`MAPPED_REGION_BYTES`] (alignment up to 4096) are instead their own
/// anonymous mapping, advised for transparent huge pages: see [`host_region_is_lazy`].
pub fn alloc_host_region(capacity: usize, align: usize) -> Result<NonNull<u8>> {
    let align = align.max(1);
    if !align.is_power_of_two() {
        return Err(Error::Alloc(format!(
            "alignment {align} is not a power of two"
        )));
    }
    debug_assert!(capacity > 0);
    if host_region_is_lazy(capacity, align) {
        return map_region(capacity);
    }
    if align <= NATURAL_ALIGN {
        let layout = Layout::from_size_align(capacity, align).map_err(|e| {
            Error::Alloc(format!("bad layout {capacity} bytes / align {align}: {e}"))
        })?;
        // SAFETY: layout has non-zero size (callers never request zero-capacity regions).
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        return NonNull::new(p)
            .ok_or_else(|| Error::Alloc(format!("out of memory allocating {capacity} bytes")));
    }
    let total = capacity
        .checked_add(align)
        .ok_or_else(|| Error::Alloc(format!("{capacity} bytes overflow with alignment {align}")))?;
    let layout = Layout::from_size_align(total, NATURAL_ALIGN)
        .map_err(|e| Error::Alloc(format!("bad layout {total} bytes: {e}")))?;
    // SAFETY: non-zero size.
    let raw = unsafe { std::alloc::alloc_zeroed(layout) };
    if raw.is_null() {
        return Err(Error::Alloc(format!(
            "out of memory allocating {capacity} bytes"
        )));
    }
    // Round up past at least one byte: the gap before the aligned pointer is in 16..=align bytes
    // (raw is 16-aligned), room for the offset word that `free_host_region` reads back.
    let offset = align - (raw as usize % align);
    debug_assert!(offset <= align && offset >= size_of::<usize>());
    // SAFETY: offset <= align, so raw + offset + capacity <= raw + total: inside the block.
    let aligned = unsafe { raw.add(offset) };
    // SAFETY: the usize slot just before `aligned` lies inside the block's leading gap
    // (offset >= 8) and is suitably aligned (aligned is a multiple of align >= 16).
    unsafe { aligned.cast::<usize>().sub(1).write(offset) };
    NonNull::new(aligned).ok_or_else(|| Error::Alloc("null region".into()))
}

/// Frees a region from [`alloc_host_region`].
///
/// # Safety
/// `ptr` must come from `alloc_host_region(capacity, align)` and not be used afterwards.
pub unsafe fn free_host_region(ptr: NonNull<u8>, capacity: usize, align: usize) {
    let align = align.max(1);
    if host_region_is_lazy(capacity, align) {
        // SAFETY: the same (capacity, align) made alloc_host_region map exactly this region.
        unsafe { unmap_region(ptr, capacity) };
        return;
    }
    if align <= NATURAL_ALIGN {
        // SAFETY: the caller guarantees the same layout that allocated it.
        unsafe {
            std::alloc::dealloc(
                ptr.as_ptr(),
                Layout::from_size_align_unchecked(capacity, align),
            )
        };
        return;
    }
    // SAFETY: alloc_host_region stored the offset to the block start in the usize before `ptr`,
    // and allocated `capacity + align` bytes with alignment 16 (the caller passes the same values).
    unsafe {
        let offset = ptr.as_ptr().cast::<usize>().sub(1).read();
        let raw = ptr.as_ptr().sub(offset);
        std::alloc::dealloc(
            raw,
            Layout::from_size_align_unchecked(capacity + align, NATURAL_ALIGN),
        );
    }
}

/// The plain CPU allocator: every acquire is a fresh zeroed heap region, every release frees it.
#[derive(Debug, Default, Clone)]
pub struct SystemAllocator {
    home: Arc<SystemHome>,
}

#[derive(Debug, Default)]
struct SystemHome;

impl RegionHome for SystemHome {
    unsafe fn release(&self, ptr: NonNull<u8>, len: usize, align: usize) {
        // SAFETY: forwarded contract: the region came from alloc_host_region(len, align).
        unsafe { free_host_region(ptr, len, align) }
    }
}

impl SystemAllocator {
    /// A new plain CPU allocator.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Allocator for SystemAllocator {
    fn device(&self) -> Device {
        Device::CPU
    }

    fn acquire(&self, bytes: usize, align: usize) -> Result<Allocation> {
        if !align.is_power_of_two() {
            return Err(Error::invalid(format!(
                "alignment {align} is not a power of two"
            )));
        }
        if bytes == 0 {
            return Ok(Allocation::empty(Device::CPU, align));
        }
        let ptr = alloc_host_region(bytes, align)?;
        let home: Arc<dyn RegionHome> = self.home.clone();
        // SAFETY: fresh region of `bytes` bytes with this alignment, released through SystemHome,
        // which frees with the same layout.
        Ok(
            unsafe {
                Allocation::from_raw_parts(ptr, bytes, bytes, align, Device::CPU, Some(home))
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_allocator_gives_aligned_zeroed_regions() {
        let a = SystemAllocator::new();
        let mut x = a.acquire(1000, 64).unwrap();
        assert_eq!(x.len(), 1000);
        assert_eq!(x.as_ptr() as usize % 64, 0);
        assert!(x.host_slice().unwrap().iter().all(|&b| b == 0));
        x.host_slice_mut().unwrap()[999] = 7;
        assert_eq!(x.host_slice().unwrap()[999], 7);
        let e = a.acquire(0, 8).unwrap();
        assert!(e.is_empty());
        assert!(a.acquire(8, 3).is_err());
    }
}
