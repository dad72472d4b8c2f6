//! Which step a delivered loader batch belongs to, and whether it is that step's batch: the
//! [`Delivered`] batch of a loader-table cell (a loader's, the bare gather's, the limit row's
//! copy, or a test-corrupted copy), its records by position, its comparison with the batch the
//! source arrays give for the step's indices, and the [`Steps`] drawn but not yet received. A
//! loader with several workers delivers in completion order (as documented), so a batch is
//! matched to the earliest pending step whose probe records equal the source's records.
//!
//! Below `loader_table`: it imports `loader_arms` (the batch size), `loader_limit` (the copy) and
//! `corrupt` (the test-only switch).

use competitors::Source;

use crate::corrupt;
use crate::error::Result;
use crate::loader_arms::BATCH;
use crate::loader_limit::Copied;

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
    /// (Dense shape and bytes; Ragged values, `cu_seqlens` and shapes), compared record by record
    /// in place: no reference batch is built, so verifying a 38.5 MB dense batch does not
    /// allocate (and fault in) a fresh 38.5 MB each time.
    pub fn same_as_source(&self, indices: &[u64], source: &Source<'_>) -> Result<bool> {
        let got = match self {
            Delivered::Loader(got) => got,
            // A reference, never the step's records (the cell does not compare it).
            Delivered::Copy(_) => return Ok(false),
            Delivered::Owned(got) => return Ok(source.check(indices, got).is_ok()),
        };
        if indices.iter().any(|&i| i >= source.len()) {
            return Ok(false);
        }
        let n = indices.len();
        Ok(match (got.as_slice(), source) {
            ([loaderx::Batch::Dense(g)], Source::Dense(d)) => {
                let shape = g.shape();
                shape.first() == Some(&(n as u64))
                    && shape[1..] == d.item_shape[..]
                    && g.bytes().len() == n * d.stride()
                    && g.bytes()
                        .chunks_exact(d.stride().max(1))
                        .zip(indices)
                        .all(|(rec, &i)| rec == d.record(i))
            }
            ([loaderx::Batch::Ragged(g)], Source::Ragged(r)) => {
                let (cu, values, shapes) = (g.cu_seqlens(), g.values(), g.shapes());
                let isz = r.dtype.itemsize();
                let mut total = 0u64;
                cu.len() == n + 1
                    && cu[0] == 0
                    && shapes.len() == n * r.ndim
                    && indices.iter().enumerate().all(|(j, &i)| {
                        total += r.elements(i);
                        i32::try_from(total).is_ok_and(|t| cu[j + 1] == t)
                            && shapes[j * r.ndim..(j + 1) * r.ndim] == *r.shape(i)
                            && values.get(cu[j] as usize * isz..cu[j + 1] as usize * isz)
                                == Some(r.record(i))
                    })
                    && values.len() as u64 == total * isz as u64
            }
            _ => false,
        })
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
