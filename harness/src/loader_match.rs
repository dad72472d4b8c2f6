//! Which step a delivered loader batch belongs to, and whether it is that step's batch: the
//! [`Delivered`] batch of a loader-table cell (a loader's, the bare gather's or the limit row's
//! copy), its records by position, its comparison with a direct gather, and the [`Steps`] drawn
//! but not yet received. A loader with several workers delivers in completion order (as
//! documented), so a batch is matched to the earliest pending step whose probe records it holds.
//!
//! Below `loader_table`: it imports `loader_arms` (the batch size) and `loader_limit` (the copy).

use loaderx::StreamView;

use crate::error::Result;
use crate::loader_arms::BATCH;
use crate::loader_limit::Copied;

/// What one step delivered: a loader's (or the bare gather's) batches, or the limit row's copy.
pub enum Delivered {
    Loader(Vec<loaderx::Batch>),
    Copy(Copied),
}

impl Delivered {
    /// Record `j`'s bytes, when this is one batch of at least `j + 1` records.
    pub fn record(&self, j: usize) -> Option<&[u8]> {
        match self {
            Delivered::Loader(v) => match v.as_slice() {
                [b] => record_bytes(b, j),
                _ => None,
            },
            Delivered::Copy(c) => {
                let cu = (!c.cu_seqlens.is_empty()).then_some(c.cu_seqlens.as_slice());
                packed_record(&c.values, BATCH, cu, j)
            }
        }
    }

    /// Whether this equals `want` (a direct gather of the step's indices) in the batch contract.
    pub fn same(&self, want: &loaderx::Batch) -> bool {
        match (self, want) {
            (Delivered::Loader(got), _) => match (got.as_slice(), want) {
                ([loaderx::Batch::Dense(g)], loaderx::Batch::Dense(w)) => g.bytes() == w.bytes(),
                ([loaderx::Batch::Ragged(g)], loaderx::Batch::Ragged(w)) => {
                    g.values() == w.values()
                        && g.cu_seqlens() == w.cu_seqlens()
                        && g.shapes() == w.shapes()
                }
                _ => false,
            },
            (Delivered::Copy(c), loaderx::Batch::Dense(w)) => {
                c.cu_seqlens.is_empty() && c.values == w.bytes()
            }
            (Delivered::Copy(c), loaderx::Batch::Ragged(w)) => {
                c.values == w.values() && c.cu_seqlens == w.cu_seqlens() && c.shapes == w.shapes()
            }
        }
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
    Some(&values[a * isz..z * isz])
}

/// The steps drawn but not yet received, each with its indices and its probe records.
#[derive(Default)]
pub struct Steps {
    pending: Vec<(Vec<u64>, loaderx::Batch)>,
}

impl Steps {
    const WINDOW: usize = 256;

    /// The indices of the earliest pending step whose probe records `b` holds (removed), drawing
    /// further steps from `draw` up to the window.
    pub fn take(
        &mut self,
        b: &Delivered,
        view: &StreamView,
        draw: &mut dyn FnMut() -> Result<Vec<u64>>,
    ) -> Result<Option<Vec<u64>>> {
        while self.pending.len() < Self::WINDOW {
            let idx = draw()?;
            let probe: Vec<u64> = PROBE.iter().map(|&j| idx[j]).collect();
            let recs = view.gather(&probe)?;
            self.pending.push((idx, recs));
        }
        let pos = self.pending.iter().position(|(_, recs)| {
            PROBE.iter().enumerate().all(|(k, &j)| {
                b.record(j)
                    .is_some_and(|got| record_bytes(recs, k) == Some(got))
            })
        });
        Ok(pos.map(|p| self.pending.remove(p).0))
    }
}
