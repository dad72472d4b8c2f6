//! Output buffers for the limit rows: advised for transparent huge pages as zrecord's own output
//! regions of `zrecord::MAPPED_REGION_BYTES` or more are, so a limit row pays the same page-table
//! cost as a gather; and recycled ([`Recycler`]): a dropped batch's buffer serves the next one,
//! as a pooled allocator's regions do, so a limit row times copying, not the page faults of fresh
//! allocations.

use std::mem::MaybeUninit;
use std::sync::{Arc, Mutex};

/// Advises the kernel to back `buf` with transparent huge pages (its whole 2 MiB pages; a no-op
/// off Linux and for buffers that hold no whole huge page).
pub fn advise_huge_pages(buf: &mut [MaybeUninit<u8>]) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = (buf.as_ptr() as usize).next_multiple_of(HUGE);
        let end = (buf.as_ptr() as usize + buf.len()) / HUGE * HUGE;
        if end > start {
            // SAFETY: advice on whole pages inside `buf`, memory this caller owns exclusively;
            // MADV_HUGEPAGE changes how the pages are backed, never their contents.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = buf;
}

/// An empty buffer with room for `capacity` bytes, huge-page advised when that is at least
/// `zrecord::MAPPED_REGION_BYTES` (as zrecord's regions are).
pub fn with_capacity(capacity: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(capacity);
    if capacity >= zrecord::MAPPED_REGION_BYTES {
        advise_huge_pages(v.spare_capacity_mut());
    }
    v
}

/// `len` zero bytes in a [`with_capacity`] buffer, faulted in before any timer starts.
pub fn zeroed(len: usize) -> Vec<u8> {
    let mut v = with_capacity(len);
    v.resize(len, 0);
    v
}

/// A copy of `bytes` in a [`with_capacity`] buffer: a store held in this process's memory.
pub fn copy_of(bytes: &[u8]) -> Vec<u8> {
    let mut v = with_capacity(bytes.len());
    v.extend_from_slice(bytes);
    v
}

/// Buffers handed back by dropped batches, for the next ones. Bounded by use: it never holds more
/// buffers than were live at once, each no larger than the largest batch rounded up to a power of
/// two. Clones share the list.
#[derive(Clone, Debug, Default)]
pub struct Recycler {
    free: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Recycler {
    /// A buffer of `len` bytes: a free one with room for them (its bytes are stale, except those
    /// past its old length, which are zero), else a new zeroed one with room to the next power of
    /// two, as zrecord's pool rounds its regions: batches of varying size would otherwise replace
    /// (free, map afresh, fault in) a buffer sized to the last one whenever the next is a little
    /// larger.
    pub fn take(&self, len: usize) -> Vec<u8> {
        let found = {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            let at = free.iter().position(|v| v.capacity() >= len);
            at.map(|k| free.swap_remove(k))
        };
        let mut v = found.unwrap_or_else(|| with_capacity(len.next_power_of_two()));
        v.resize(len, 0);
        v
    }

    /// Hands `buf` back for a later [`Recycler::take`].
    pub fn give(&self, buf: Vec<u8>) {
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_buffer_serves_the_next_take_that_fits() {
        let r = Recycler::default();
        let a = r.take(1000);
        assert_eq!(a.len(), 1000);
        assert_eq!(a.capacity(), 1024);
        let ptr = a.as_ptr();
        r.give(a);
        let b = r.take(1024);
        assert_eq!((b.as_ptr(), b.len()), (ptr, 1024));
        // Nothing free fits: a new buffer; the old one stays for a later take.
        let c = r.take(5000);
        assert_ne!(c.as_ptr(), ptr);
        r.give(b);
        r.give(c);
        let d = r.clone().take(10);
        assert_eq!(d.len(), 10);
        assert!(d.iter().all(|&x| x == 0));
    }

    #[test]
    fn copies_and_zeroed_buffers_hold_what_they_say() {
        let big = zrecord::MAPPED_REGION_BYTES + 12345;
        let src: Vec<u8> = (0..big).map(|k| (k % 253) as u8).collect();
        assert_eq!(copy_of(&src), src);
        let z = zeroed(big);
        assert_eq!(z.len(), big);
        assert!(z.iter().all(|&x| x == 0));
        assert!(with_capacity(17).capacity() >= 17);
    }
}
