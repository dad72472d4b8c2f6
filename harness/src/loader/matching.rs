//! Which step a delivered loader batch belongs to, and whether it is that step's batch: the
//! [`Delivered`] batch of a loader-table cell (a loader's, the bare gather's, the limit row's
//! copy, or a test-corrupted copy), its records by position, its comparison with the batch the
//! source arrays give for the step's indices, and the [`Steps`] drawn but not yet received. A
//! loader with several workers delivers in completion order (as documented), so a batch is
//! matched to the earliest pending step whose probe records equal the source's records.

use competitors::Source;

use crate::corrupt;
use crate::error::Result;
use crate::loader::arms::BATCH;
use crate::loader::limit::Copied;

/// What one step delivered: a loader's (or the bare gather's) batches, the limit row's copy, or
/// an owned copy of a delivered batch (what `LOADERX_HARNESS_CORRUPT_BATCH` turns one into).
pub enum Delivered {
    Loader(Vec<loaderx::Batch>),
    /// Held until the consumer drops it (its buffer then goes back to the free list).
    Copy(
        #[expect(
            dead_code,
            reason = "held for its lifetime; a reference is never compared"
        )]
        Copied,
    ),
    Owned(competitors::Batch),
}

/// One batch's values, its `cu_seqlens` (Ragged; `None` for Dense) and its shape (Dense) or its
/// records' shapes (Ragged).
type Parts<'a> = (&'a [u8], Option<&'a [i32]>, &'a [u64]);

impl Delivered {
    /// The parts of this one batch; `None` for several batches and for the limit row's copy.
    fn parts(&self) -> Option<Parts<'_>> {
        use competitors::Batch as Owned;
        match self {
            Delivered::Loader(v) => match v.as_slice() {
                [loaderx::Batch::Dense(d)] => Some((d.bytes(), None, d.shape())),
                [loaderx::Batch::Ragged(r)] => Some((r.values(), Some(r.cu_seqlens()), r.shapes())),
                _ => None,
            },
            Delivered::Copy(_) => None,
            Delivered::Owned(Owned::Dense(d)) => Some((d.bytes(), None, d.shape())),
            Delivered::Owned(Owned::Ragged(r)) => {
                Some((r.values(), Some(r.cu_seqlens()), r.shapes()))
            }
        }
    }

    /// Record `j`'s bytes, when this is one batch of at least `j + 1` records: equal slices
    /// (Dense) or the spans `cu_seqlens` gives in elements (Ragged).
    pub fn record(&self, j: usize) -> Option<&[u8]> {
        let (values, cu, shape) = self.parts()?;
        let Some(cu) = cu else {
            let n = *shape.first()? as usize;
            let item = values.len().checked_div(n)?;
            return (j < n).then(|| &values[j * item..(j + 1) * item]);
        };
        let isz = values.len().checked_div(*cu.last()? as usize).unwrap_or(1);
        let (a, z) = (*cu.get(j)? as usize, *cu.get(j + 1)? as usize);
        values.get(a * isz..z * isz)
    }

    /// Whether this is the batch the source arrays give for `indices`, in the batch contract
    /// (Dense shape and bytes; Ragged values, `cu_seqlens` and shapes): `Source::check_dense` and
    /// `check_ragged`, which compare record by record in place, so verifying a 38.5 MB dense
    /// batch does not allocate (and fault in) a fresh 38.5 MB reference each time. The limit
    /// row's copy is a reference, never the step's records.
    pub fn same_as_source(&self, indices: &[u64], source: &Source<'_>) -> bool {
        match self.parts() {
            Some((v, None, shape)) => source.check_dense(indices, v, shape).is_ok(),
            Some((v, Some(cu), shapes)) => source.check_ragged(indices, v, cu, shapes).is_ok(),
            None => false,
        }
    }

    /// An owned copy of this loader batch with one byte of its values flipped (the test-only
    /// [`corrupt::ENV`]); `None` when it holds no value byte to flip, for an owned copy, and for
    /// the limit row's copy, a reference with nothing to compare.
    pub fn corrupted(&self) -> Option<Delivered> {
        let Delivered::Loader(_) = self else {
            return None;
        };
        let (values, cu, shape) = self.parts()?;
        corrupt::flipped(values, cu, shape).map(Delivered::Owned)
    }
}

/// Positions of the records that tell which step a delivered batch belongs to.
const PROBE: [usize; 4] = [0, 1, BATCH / 2, BATCH - 1];

/// The steps drawn but not yet received, by their indices.
#[derive(Default)]
pub struct Steps {
    pending: Vec<Vec<u64>>,
}

impl Steps {
    const WINDOW: usize = 256;

    /// The indices of the earliest pending step whose probe records in `b` equal the source's
    /// records at those indices (removed), drawing further steps from `draw` up to the window.
    pub fn take(
        &mut self,
        b: &Delivered,
        source: &Source<'_>,
        draw: &mut dyn FnMut() -> Result<Vec<u64>>,
    ) -> Result<Option<Vec<u64>>> {
        while self.pending.len() < Self::WINDOW {
            self.pending.push(draw()?);
        }
        let pos = self.pending.iter().position(|idx| {
            PROBE.iter().all(|&j| {
                idx.get(j)
                    .is_some_and(|&i| i < source.len() && b.record(j) == Some(source.record(i)))
            })
        });
        Ok(pos.map(|p| self.pending.remove(p)))
    }
}
