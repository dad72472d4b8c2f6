//! [`RawBytes`]: a read-only handle on memory that code outside Rust may write at any time (a
//! region exported through DLPack, or a foreign tensor imported through it).
//!
//! This is the binding's exported-memory contract (see `zrecord::Allocation`): once a region's
//! pointer has been handed to Python (NumPy, PyTorch, ...), the consumer may write it from any
//! thread, with or without the GIL. Rust therefore never forms a `&[u8]` / `&mut [u8]` over such a
//! region. It reads it only through [`RawBytes`], whose every read is a one-shot raw-pointer copy
//! into a buffer Rust owns, and it validates and encodes only that copy. A write that races with the
//! copy is the user's own race: Rust makes no assumption about the region's contents between
//! copies, and the worst it can see is torn values in its private copy, which are then checked like
//! any other input.

use std::marker::PhantomData;

/// `len` bytes at `ptr`, readable for `'a` but possibly written concurrently by foreign code.
/// Only copies come out of it; it never hands out a reference into the region.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawBytes<'a> {
    ptr: *const u8,
    len: usize,
    _region: PhantomData<&'a ()>,
}

// SAFETY: a `RawBytes` is a pointer and a length whose referent stays alive for `'a` (the
// constructor's contract) and is only ever read through raw-pointer copies, which need no
// exclusivity; sending it to another thread (a `detach` section) changes neither.
unsafe impl Send for RawBytes<'_> {}
// SAFETY: `&RawBytes` allows only the same raw-pointer copies, which any number of threads may
// make at once (reads need no exclusivity).
unsafe impl Sync for RawBytes<'_> {}

impl<'a> RawBytes<'a> {
    /// The empty region.
    pub(crate) const EMPTY: RawBytes<'static> = RawBytes {
        ptr: std::ptr::null(),
        len: 0,
        _region: PhantomData,
    };

    /// Wraps `len` bytes at `ptr`.
    ///
    /// # Safety
    /// When `len > 0`, `ptr` must be valid for reads of `len` bytes for all of `'a` (the owner of
    /// the memory is kept alive at least that long). The bytes may be written concurrently by
    /// foreign code, but no Rust reference (`&`/`&mut`) to them may exist during `'a` elsewhere.
    pub(crate) unsafe fn new(ptr: *const u8, len: usize) -> Self {
        RawBytes {
            ptr,
            len,
            _region: PhantomData,
        }
    }

    /// Size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Copies the bytes into `dst` (which must be exactly `len` bytes long).
    pub(crate) fn copy_into(&self, dst: &mut [u8]) {
        assert_eq!(dst.len(), self.len, "RawBytes::copy_into length mismatch");
        if self.len == 0 {
            return;
        }
        // SAFETY: `ptr` is valid for `len` reads for `'a` (constructor contract) and `dst` is an
        // exclusive Rust buffer of the same length, so the two ranges cannot overlap. No reference
        // into the source is formed.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr, dst.as_mut_ptr(), self.len) }
    }

    /// A private copy of the bytes.
    pub(crate) fn to_vec(self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        self.copy_into(&mut v);
        v
    }

    /// The bytes decoded as native-endian `i32`s (a trailing partial element is ignored).
    pub(crate) fn to_i32s(self) -> Vec<i32> {
        self.to_vec()
            .chunks_exact(4)
            .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// The bytes decoded as native-endian `u64`s (a trailing partial element is ignored).
    pub(crate) fn to_u64s(self) -> Vec<u64> {
        self.to_vec()
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect()
    }
}
