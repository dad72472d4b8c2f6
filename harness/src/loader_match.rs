//! Which step a delivered loader batch belongs to, and whether it is that step's batch: the
//! [`Delivered`] batch of a loader-table cell (a loader's, the bare gather's or the limit row's
//! copy), its records by position, its comparison with a direct gather, and the [`Steps`] drawn
//! but not yet received. A loader with several workers delivers in completion order (as
//! documented), so a batch is matched to the earliest pending step whose probe records it holds.
//!
//! Below `loader_table`: it imports `loader_arms` (the batch size) and `loader_limit` (the copy).

use loaderx::StreamView;

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
            Delivered::Copy(c) if c.cu_seqlens.is_empty() => {
                let item = c.values.len().checked_div(BATCH)?;
                (j < BATCH).then(|| &c.values[j * item..(j + 1) * item])
            }
            Delivered::Copy(c) => {
                let total = *c.cu_seqlens.last()? as usize;
                let isz = c.values.len().checked_div(total).unwrap_or(1);
                let (a, z) = (
                    *c.cu_seqlens.get(j)? as usize,
                    *c.cu_seqlens.get(j + 1)? as usize,
                );
                Some(&c.values[a * isz..z * isz])
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
        loaderx::Batch::Dense(d) => {
            let n = *d.shape().first()? as usize;
            let item = d.bytes().len().checked_div(n)?;
            (j < n).then(|| &d.bytes()[j * item..(j + 1) * item])
        }
        loaderx::Batch::Ragged(r) => {
            let cu = r.cu_seqlens();
            let total = *cu.last()? as usize;
            let isz = r.values().len().checked_div(total).unwrap_or(1);
            let (a, z) = (*cu.get(j)? as usize, *cu.get(j + 1)? as usize);
            Some(&r.values()[a * isz..z * isz])
        }
    }
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
        draw: &mut dyn FnMut() -> Result<Vec<u64>, String>,
    ) -> Result<Option<Vec<u64>>, String> {
        while self.pending.len() < Self::WINDOW {
            let idx = draw()?;
            let probe: Vec<u64> = PROBE.iter().map(|&j| idx[j]).collect();
            let recs = view.gather(&probe).map_err(|e| e.to_string())?;
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
