//! `memcpy-limit`: the physical limit row. The "store" is an in-memory copy of the source; a gather
//! copies the same records into one output buffer with benchkit's copy limit
//! ([`benchkit::copy`]), split into zrecord's byte-balanced pieces on rayon's global pool when the
//! batch holds at least [`crate::PAR_MIN_BYTES`] (the same rule and pool every parallel adapter
//! here uses). Each record is copied with the stores a zrecord raw gather of the same output size
//! uses: ordinary `memcpy` below the last-level cache size, non-temporal stores from it up, where
//! they move the same bytes with a third less memory traffic. Output buffers are recycled
//! ([`benchkit::buffers::Recycler`]: a dropped batch's buffer serves the next gather) and advised
//! for transparent huge pages like zrecord's output regions, so the row measures copying alone,
//! not page faults of fresh allocations nor 4 KiB page walks: the same policy as zrecord's pooled
//! allocator.

use std::path::Path;
use std::sync::Arc;

use benchkit::buffers::Recycler;
use benchkit::copy::{Kernel, copy_records, copy_strided, parallel_pieces};

use crate::backend::Backend;
use crate::error::{Result, bail};
use crate::interface::{Competitor, Reader, Stored};
use crate::output::{Batch, DenseOutput, RaggedOutput};
use crate::source::Source;
use crate::util::{PAR_MIN_BYTES, batch_shape, check_indices, cu_seqlens, gather_shapes};

#[derive(Debug)]
enum Mem {
    Dense {
        stride: usize,
        item_shape: Vec<u64>,
        data: Vec<u8>,
    },
    Ragged {
        itemsize: usize,
        ndim: usize,
        values: Vec<u8>,
        byte_offsets: Vec<usize>,
        shapes: Vec<u64>,
    },
}

/// The in-memory `memcpy` limit row.
#[derive(Debug, Default)]
pub struct MemcpyLimit {
    mem: Option<Arc<Mem>>,
}

impl Competitor for MemcpyLimit {
    fn backend(&self) -> Backend {
        Backend::MemcpyLimit
    }

    fn write(&mut self, source: &Source<'_>, dir: &Path) -> Result<Stored> {
        source.validate()?;
        std::fs::create_dir_all(dir)?;
        let mem = match source {
            Source::Dense(d) => Mem::Dense {
                stride: d.stride(),
                item_shape: d.item_shape.clone(),
                data: d.data.to_vec(),
            },
            Source::Ragged(r) => {
                let it = r.dtype.itemsize();
                let base = r.offsets[0];
                Mem::Ragged {
                    itemsize: it,
                    ndim: r.ndim,
                    values: r.payload().to_vec(),
                    byte_offsets: r
                        .offsets
                        .iter()
                        .map(|&o| (o - base) as usize * it)
                        .collect(),
                    shapes: r.shapes.to_vec(),
                }
            }
        };
        self.mem = Some(Arc::new(mem));
        Ok(Stored::new(self.backend(), dir, source))
    }

    fn open(&self, stored: &Stored) -> Result<Box<dyn Reader>> {
        let Some(mem) = self.mem.clone() else {
            bail!("memcpy-limit: open before write (the store lives in memory)");
        };
        Ok(Box::new(MemcpyReader {
            mem,
            len: stored.len,
            bin: Recycler::default(),
        }))
    }
}

struct MemcpyReader {
    mem: Arc<Mem>,
    len: u64,
    bin: Recycler,
}

/// Pieces the copy of `n` records and `total` bytes is split into: one (the calling thread) below
/// [`PAR_MIN_BYTES`], as every adapter here decides.
fn pieces(total: usize, n: usize) -> usize {
    if total >= PAR_MIN_BYTES && n > 1 {
        parallel_pieces()
    } else {
        1
    }
}

impl Reader for MemcpyReader {
    fn len(&self) -> u64 {
        self.len
    }

    fn gather(&mut self, indices: &[u64]) -> Result<Batch> {
        check_indices(indices, self.len)?;
        match &*self.mem {
            Mem::Dense {
                stride,
                item_shape,
                data,
            } => {
                let (s, n) = (*stride, indices.len());
                let mut bytes = self.bin.take(n * s);
                copy_strided(
                    &mut bytes,
                    data,
                    s,
                    indices,
                    Kernel::AsGather,
                    pieces(n * s, n),
                );
                Ok(Batch::Dense(Box::new(Recycled {
                    bytes,
                    cu_seqlens: Vec::new(),
                    shape: batch_shape(n, item_shape),
                    bin: self.bin.clone(),
                })))
            }
            Mem::Ragged {
                itemsize,
                ndim,
                values,
                byte_offsets,
                shapes,
            } => {
                let recs: Vec<&[u8]> = indices
                    .iter()
                    .map(|&i| &values[byte_offsets[i as usize]..byte_offsets[i as usize + 1]])
                    .collect();
                let cu_seqlens = cu_seqlens(recs.iter().map(|r| r.len()), *itemsize)?;
                // Record `k` starts at its first element's byte.
                let at = |k: usize| cu_seqlens[k] as usize * itemsize;
                let n = recs.len();
                let total = at(n);
                let mut values = self.bin.take(total);
                copy_records(
                    &mut values,
                    n,
                    &at,
                    |k| recs[k],
                    Kernel::AsGather,
                    pieces(total, n),
                );
                Ok(Batch::Ragged(Box::new(Recycled {
                    bytes: values,
                    cu_seqlens,
                    shape: gather_shapes(shapes, *ndim, indices),
                    bin: self.bin.clone(),
                })))
            }
        }
    }
}

/// A gathered batch of either geometry (Dense: `shape`; Ragged: `cu_seqlens` and `shapes` in
/// `shape`) whose byte buffer returns to the reader's recycler on drop.
struct Recycled {
    bytes: Vec<u8>,
    cu_seqlens: Vec<i32>,
    shape: Vec<u64>,
    bin: Recycler,
}

impl Drop for Recycled {
    fn drop(&mut self) {
        self.bin.give(std::mem::take(&mut self.bytes));
    }
}

impl DenseOutput for Recycled {
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }
    fn shape(&self) -> &[u64] {
        &self.shape
    }
}

impl RaggedOutput for Recycled {
    fn values(&self) -> &[u8] {
        &self.bytes
    }
    fn cu_seqlens(&self) -> &[i32] {
        &self.cu_seqlens
    }
    fn shapes(&self) -> &[u64] {
        &self.shape
    }
}
