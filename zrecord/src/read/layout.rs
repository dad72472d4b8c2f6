//! The record layout the store, view, batch and writer types are generic over: [`Dense`] (one
//! fixed shape for every record, stored once in the manifest) or [`Ragged`] (a shape per record,
//! stored in its index entry). [`Layout`] is sealed; what differs between the two lives here:
//! how a gather sizes its one output allocation and fills it, and what a batch carries besides
//! its memory and dtype. Everything else is written once, in [`super::store`], [`super::view`],
//! [`super::batch`] and `crate::write::writer`.
//!
//! Each view's gather calls its layout's function directly (`L::gather`): the generic code
//! monomorphises into one gather per layout, with no dispatch per record or per batch.

use std::fmt;

use crate::error::{Error, Result};
use crate::format::Kind;

use crate::alloc::{Allocation, Allocator};

use super::container::Container;
use super::engine::gather_into;
use super::hint::PREFETCH_AHEAD;
use super::opened::Opened;
use super::parts::Located;
use super::plan::push_shape;

/// Alignment of every output region and of each field inside a Ragged region.
pub const OUTPUT_ALIGN: usize = 64;

/// A record layout: [`Dense`] or [`Ragged`]. Sealed: the two are all there is, as in the format.
pub trait Layout: sealed::Sealed + Clone + Send + Sync + 'static {}

/// Fixed-shape records: every record has the store's `item_shape` (0-D allowed); a batch is
/// `(n, *item_shape)`, records back to back.
#[derive(Clone, Copy, Debug)]
pub enum Dense {}

/// Variable-shape records of one rank `>= 1`, each with its own `u64` shape; a batch packs
/// `values | cu_seqlens | shapes` into one allocation.
#[derive(Clone, Copy, Debug)]
pub enum Ragged {}

impl Layout for Dense {}
impl Layout for Ragged {}

/// Where the three fields of a Ragged batch lie in its allocation.
#[derive(Clone, Copy, Debug)]
pub struct RaggedFields {
    /// Number of records.
    pub(super) n: usize,
    /// Rank of every record.
    pub(super) ndim: usize,
    /// Byte length of the values field (it starts at 0).
    pub(super) values_len: usize,
    /// Byte offset of `cu_seqlens` (`n + 1` int32).
    pub(super) cu_off: usize,
    /// Byte offset of the shapes (`n * ndim` u64).
    pub(super) shapes_off: usize,
}

// The sealed trait is unnameable outside the crate, so its functions taking the crate-private
// `Container` expose nothing.
#[allow(private_interfaces)]
mod sealed {
    use super::*;

    /// What differs between the layouts. Unnameable outside the crate, so [`Layout`] cannot be
    /// implemented elsewhere; generic code reaches these items through the `Layout` bound.
    pub trait Sealed: Sized {
        /// The store kind in the manifest.
        const KIND: Kind;
        /// `Dense` or `Ragged`: the public types' names start with it (`DenseStore`, ...).
        const NAME: &'static str;
        /// What a batch carries besides its allocation and dtype.
        type Form: Send + Sync;
        /// Gathers `idx` of `o` into one allocation from `alloc`, sized exactly before any
        /// copy; the view wraps it and the form into its batch.
        fn gather(
            o: &Opened,
            alloc: &dyn Allocator,
            idx: &[u64],
        ) -> Result<(Allocation, Self::Form)>;
        /// A one-record batch's form as `View::get` returns it.
        fn single(form: &mut Self::Form);
        /// The batch's `Debug` fields before its dtype.
        fn debug_form(form: &Self::Form, d: &mut fmt::DebugStruct<'_, '_>);
    }

    impl Sealed for Dense {
        const KIND: Kind = Kind::Dense;
        const NAME: &'static str = "Dense";
        /// The batch's shape: `(n, *item_shape)`, or `item_shape` for a single record.
        type Form = Vec<u64>;

        fn gather(
            o: &Opened,
            alloc: &dyn Allocator,
            idx: &[u64],
        ) -> Result<(Allocation, Vec<u64>)> {
            let stride = o.record_bytes() as usize;
            o.check_gather(idx)?;
            let mut a = dense_output(alloc, idx.len(), stride)?;
            let out = a.host_slice_mut_or_err()?;
            match o.window() {
                None => fill_dense(o, idx, out, stride)?,
                Some(w) => w.fill(
                    o.records(),
                    idx,
                    out,
                    |k| k * stride..(k + 1) * stride,
                    |ids| {
                        let n = ids.len().checked_mul(stride).ok_or_else(|| {
                            Error::LimitExceeded(format!("a block of {} records", ids.len()))
                        })?;
                        let mut bytes = vec![0u8; n];
                        fill_dense(o, ids, &mut bytes, stride)?;
                        Ok((bytes, (0..=ids.len()).map(|r| r * stride).collect()))
                    },
                )?,
            }
            let mut shape = Vec::with_capacity(1 + o.item_shape().len());
            shape.push(idx.len() as u64);
            shape.extend_from_slice(o.item_shape());
            Ok((a, shape))
        }

        fn single(shape: &mut Vec<u64>) {
            shape.remove(0);
        }

        fn debug_form(shape: &Vec<u64>, d: &mut fmt::DebugStruct<'_, '_>) {
            d.field("shape", shape);
        }
    }

    impl Sealed for Ragged {
        const KIND: Kind = Kind::Ragged;
        const NAME: &'static str = "Ragged";
        type Form = RaggedFields;

        fn gather(
            o: &Opened,
            alloc: &dyn Allocator,
            idx: &[u64],
        ) -> Result<(Allocation, RaggedFields)> {
            let isz = o.dtype().itemsize();
            let ndim = o.ndim() as usize;
            let (cu, dims, at) = sizes(o, idx)?;
            ragged_output(alloc, ndim, isz, &cu, &dims, |values| match o.window() {
                None => fill_ragged(o, idx, &cu, values, at.as_ref()),
                Some(w) => w.fill(
                    o.records(),
                    idx,
                    values,
                    |k| cu[k] as usize * isz..cu[k + 1] as usize * isz,
                    |ids| {
                        let (cu, _, at) = sizes(o, ids)?;
                        let mut bytes = vec![0u8; cu[ids.len()] as usize * isz];
                        fill_ragged(o, ids, &cu, &mut bytes, at.as_ref())?;
                        Ok((bytes, cu.iter().map(|&c| c as usize * isz).collect()))
                    },
                ),
            })
        }

        fn single(_: &mut RaggedFields) {}

        fn debug_form(form: &RaggedFields, d: &mut fmt::DebugStruct<'_, '_>) {
            d.field("records", &form.n).field("ndim", &form.ndim);
        }
    }
}

/// Fills `out` with the Dense records `idx` of `o` (`stride` bytes each), read from the store.
fn fill_dense(o: &Opened, idx: &[u64], out: &mut [u8], stride: usize) -> Result<()> {
    match o {
        Opened::One(c) => gather_into(c, idx, out, &|k| k * stride),
        Opened::Parts(p) => p.fill_dense(idx, out),
    }
}

/// A Ragged gather's element counts and shapes, from the index of a container or the parts' (and
/// then where the records are, for [`fill_ragged`]).
#[allow(clippy::type_complexity)]
fn sizes<'o>(o: &'o Opened, idx: &[u64]) -> Result<(Vec<i32>, Vec<u64>, Option<Located<'o>>)> {
    match o {
        Opened::One(c) => ragged_sizes(c, idx).map(|(cu, dims)| (cu, dims, None)),
        Opened::Parts(p) => p
            .ragged_sizes(idx)
            .map(|(cu, dims, at)| (cu, dims, Some(at))),
    }
}

/// Fills `values` with the Ragged records `idx` of `o` (element counts `cu`; in a dataset of
/// parts, located by [`sizes`] as `at`), read from the store.
fn fill_ragged(
    o: &Opened,
    idx: &[u64],
    cu: &[i32],
    values: &mut [u8],
    at: Option<&Located<'_>>,
) -> Result<()> {
    match (o, at) {
        (Opened::Parts(p), Some(at)) => p.fill_ragged(at, cu, values),
        (Opened::Parts(p), None) => p.fill_ragged(&p.locate_batch(idx)?, cu, values),
        (Opened::One(c), _) => {
            let isz = c.dtype().itemsize();
            gather_into(c, idx, values, &|k| cu[k] as usize * isz)
        }
    }
}

/// A Ragged gather's element counts (`cu`, `n + 1` entries from 0) and shapes, from `c`'s index
/// (no payload touched).
fn ragged_sizes(c: &Container, idx: &[u64]) -> Result<(Vec<i32>, Vec<u64>)> {
    c.check_open()?;
    c.check_indices(idx)?;
    let _index = c.check_pages(idx)?;
    let n = idx.len();
    let ndim = c.ndim() as usize;
    let index = c.index_bytes();
    let mut cu: Vec<i32> = Vec::with_capacity(n + 1);
    let mut dims: Vec<u64> = Vec::with_capacity(n * ndim);
    cu.push(0);
    for (k, &i) in idx.iter().enumerate() {
        if let Some(&ahead) = idx.get(k + 2 * PREFETCH_AHEAD) {
            c.prefetch_entry(index, ahead);
        }
        push_shape(&mut cu, &mut dims, c.shape_words_in(index, i), n)?;
    }
    Ok((cu, dims))
}

/// One Ragged output allocation from `alloc` for records of element counts `cu` and shapes
/// `dims`: `cu_seqlens` and shapes written, the values field handed to `fill`.
fn ragged_output(
    alloc: &dyn Allocator,
    ndim: usize,
    isz: usize,
    cu: &[i32],
    dims: &[u64],
    fill: impl FnOnce(&mut [u8]) -> Result<()>,
) -> Result<(Allocation, RaggedFields)> {
    let n = cu.len() - 1;
    let values_len = cu[n] as usize * isz;
    let cu_off = values_len.next_multiple_of(OUTPUT_ALIGN);
    let shapes_off = (cu_off + 4 * (n + 1)).next_multiple_of(OUTPUT_ALIGN);
    let bytes = shapes_off + 8 * n * ndim;
    let mut alloc = alloc.acquire(bytes, OUTPUT_ALIGN)?;
    let out = alloc.host_slice_mut_or_err()?;
    let (values, meta) = out.split_at_mut(cu_off);
    for (dst, v) in meta[..4 * (n + 1)].chunks_exact_mut(4).zip(cu) {
        dst.copy_from_slice(&v.to_ne_bytes());
    }
    let shapes = &mut meta[shapes_off - cu_off..];
    for (dst, d) in shapes.chunks_exact_mut(8).zip(dims) {
        dst.copy_from_slice(&d.to_ne_bytes());
    }
    fill(&mut values[..values_len])?;
    let form = RaggedFields {
        n,
        ndim,
        values_len,
        cu_off,
        shapes_off,
    };
    Ok((alloc, form))
}

/// One Dense output allocation for `n` records of `stride` bytes.
fn dense_output(alloc: &dyn Allocator, n: usize, stride: usize) -> Result<Allocation> {
    let bytes = n
        .checked_mul(stride)
        .ok_or_else(|| Error::LimitExceeded(format!("{n} records of {stride} bytes")))?;
    alloc.acquire(bytes, OUTPUT_ALIGN)
}
