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

impl Delivered {
    /// Record `j`'s bytes, when this is one batch of at least `j + 1` records.
    pub fn record(&self, j: usize) -> Option<&[u8]> {
        match self {
            Delivered::Loader(v) => match v.as_slice() {
                [b] => record_bytes(b, j),
                _ => None,
            },
            // The limit row's copy is a span of the store, not the step's records.
            Delivered::Copy(_) => None,
            Delivered::Owned(competitors::Batch::Dense(d)) => {
                packed_record(d.bytes(), *d.shape().first()? as usize, None, j)
            }
            Delivered::Owned(competitors::Batch::Ragged(r)) => {
                let cu = r.cu_seqlens();
                packed_record(r.values(), cu.len().saturating_sub(1), Some(cu), j)
            }
        }
    }

    /// Whether this is the batch the source arrays give for `indices`, in the batch contract
    /// (Dense shape and bytes; Ragged values, `cu_seqlens` and shapes): `Source::check`, which
    /// compares record by record in place, so verifying a 38.5 MB dense batch does not allocate
    /// (and fault in) a fresh 38.5 MB reference each time.
    pub fn same_as_source(&self, indices: &[u64], source: &Source<'_>) -> bool {
        match self {
            Delivered::Loader(got) => match got.as_slice() {
                [loaderx::Batch::Dense(g)] => {
                    source.check_dense(indices, g.bytes(), g.shape()).is_ok()
                }
                [loaderx::Batch::Ragged(g)] => source
                    .check_ragged(indices, g.values(), g.cu_seqlens(), g.shapes())
                    .is_ok(),
                _ => false,
            },
            // A reference, never the step's records (the cell does not compare it).
            Delivered::Copy(_) => false,
            Delivered::Owned(got) => source.check(indices, got).is_ok(),
        }
    }

    /// An owned copy of this batch with one byte of its values flipped (the test-only
    /// [`corrupt::ENV`]); `None` when it holds no value byte to flip, and for the limit row's
    /// copy, a reference with nothing to compare.
    pub fn corrupted(&self) -> Option<Delivered> {
        let (mut values, cu, shapes, dense_shape) = match self {
            Delivered::Loader(v) => match v.as_slice() {
                [loaderx::Batch::Dense(d)] => {
                    (d.bytes().to_vec(), None, vec![], d.shape().to_vec())
                }
                [loaderx::Batch::Ragged(r)] => (
                    r.values().to_vec(),
                    Some(r.cu_seqlens().to_vec()),
                    r.shapes().to_vec(),
                    vec![],
                ),
                _ => return None,
            },
            Delivered::Copy(_) | Delivered::Owned(_) => return None,
        };
        if !corrupt::flip(&mut values) {
            return None;
        }
        Some(Delivered::Owned(match cu {
            None => competitors::Batch::Dense(Box::new(competitors::DenseOut {
                bytes: values,
                shape: dense_shape,
            })),
            Some(cu_seqlens) => competitors::Batch::Ragged(Box::new(competitors::RaggedOut {
                values,
                cu_seqlens,
                shapes,
            })),
        }))
    }
}

/// Positions of the records that tell which step a delivered batch belongs to.
const PROBE: [usize; 4] = [0, 1, BATCH / 2, BATCH - 1];

/// Record `j` of a batch, as bytes.
fn record_bytes(b: &loaderx::Batch, j: usize) -> Option<&[u8]> {
    match b {
        loaderx::Batch::Dense(d) => packed_record(d.bytes(), *d.shape().first()? as usize, None, j),
        loaderx::Batch::Ragged(r) => {
            let cu = r.cu_seqlens();
            packed_record(r.values(), cu.len().saturating_sub(1), Some(cu), j)
        }
    }
}

/// Record `j` of `n` packed back to back in `values`: equal slices (Dense, no `cu_seqlens`) or
/// the spans `cu_seqlens` gives in elements (Ragged).
fn packed_record<'a>(values: &'a [u8], n: usize, cu: Option<&[i32]>, j: usize) -> Option<&'a [u8]> {
    let Some(cu) = cu else {
        let item = values.len().checked_div(n)?;
        return (j < n).then(|| &values[j * item..(j + 1) * item]);
    };
    let total = *cu.last()? as usize;
    let isz = values.len().checked_div(total).unwrap_or(1);
    let (a, z) = (*cu.get(j)? as usize, *cu.get(j + 1)? as usize);
    values.get(a * isz..z * isz)
}

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
