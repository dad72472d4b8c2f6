//! `memcpy-limit`: the physical limit row. The "store" is an in-memory copy of the source; a gather
//! copies the same records into one output buffer, on rayon's global pool when the batch holds at
//! least [`crate::PAR_MIN_BYTES`] (the same rule and pool every parallel adapter here uses). Each
//! record is copied with the stores a zrecord raw gather of the same output size uses
//! (`zrecord::bench_copy_as_gather`): ordinary `memcpy` below the last-level cache size,
//! non-temporal stores from it up, where they move the same bytes with a third less memory
//! traffic. Output buffers are recycled (a dropped batch's buffer serves the next gather) and
//! advised for transparent huge pages like zrecord's output regions, so the row measures copying
//! alone, not page faults of fresh allocations nor 4 KiB page walks: the same policy as zrecord's
//! pooled allocator.

use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::error::{Result, bail};
use crate::interface::{Competitor, Reader, Stored};
use crate::output::Batch;
use crate::output::{DenseOut, DenseOutput, RaggedOut, RaggedOutput};
use crate::source::Geometry;
use crate::source::Source;
use crate::util::{check_indices, fill_dense_with, pack_ragged_with};

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
    fn name(&self) -> &'static str {
        "memcpy-limit"
    }

    fn supports(&self, _geometry: Geometry) -> bool {
        true
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
                    values: r.values
                        [base as usize * it..*r.offsets.last().expect("n+1") as usize * it]
                        .to_vec(),
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
        Ok(Stored {
            backend: self.name(),
            dir: dir.to_path_buf(),
            geometry: source.geometry(),
            len: source.len(),
            write_seconds: None,
        })
    }

    fn open(&self, stored: &Stored) -> Result<Box<dyn Reader>> {
        let Some(mem) = self.mem.clone() else {
            bail!("memcpy-limit: open before write (the store lives in memory)");
        };
        Ok(Box::new(MemcpyReader {
            mem,
            len: stored.len,
            bin: Arc::default(),
        }))
    }
}

struct MemcpyReader {
    mem: Arc<Mem>,
    len: u64,
    bin: Arc<Bin>,
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
                let s = *stride;
                let total = indices.len() * s;
                let buf = self.bin.take(total);
                let copy = |d: &mut [u8], r: &[u8]| zrecord::bench_copy_as_gather(d, r, total);
                let record = |k: usize| {
                    let i = indices[k] as usize;
                    &data[i * s..(i + 1) * s]
                };
                let out = fill_dense_with(buf, indices.len(), s, item_shape, record, copy);
                Ok(Batch::Dense(Box::new(Recycled {
                    out,
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
                let mut sh = Vec::with_capacity(indices.len() * ndim);
                for &i in indices {
                    sh.extend_from_slice(&shapes[i as usize * ndim..(i as usize + 1) * ndim]);
                }
                let total: usize = recs.iter().map(|r| r.len()).sum();
                let copy = |d: &mut [u8], r: &[u8]| zrecord::bench_copy_as_gather(d, r, total);
                let (values, cu_seqlens) =
                    pack_ragged_with(self.bin.take(total), &recs, *itemsize, copy)?;
                Ok(Batch::Ragged(Box::new(RecycledRagged {
                    out: RaggedOut {
                        values,
                        cu_seqlens,
                        shapes: sh,
                    },
                    bin: self.bin.clone(),
                })))
            }
        }
    }
}

/// One spare output buffer, handed back when a batch is dropped.
#[derive(Debug, Default)]
struct Bin(Mutex<Option<Vec<u8>>>);

impl Bin {
    fn take(&self, len: usize) -> Vec<u8> {
        let spare = self.0.lock().ok().and_then(|mut g| g.take());
        match spare {
            Some(mut v) if v.capacity() >= len => {
                v.resize(len, 0);
                v
            }
            _ => {
                // Room to the next power of two, as zrecord's pool rounds its regions: Ragged
                // batches vary in size, and a buffer sized to the last one would be replaced
                // (freed, mapped afresh, page-faulted) whenever a batch is a little larger, which
                // timed page faults rather than copying (p95 3.5x the median on ragged-vision).
                let mut v = Vec::with_capacity(len.next_power_of_two());
                if len >= zrecord::MAPPED_REGION_BYTES {
                    zrecord::bench_advise_huge_pages(v.spare_capacity_mut());
                }
                v.resize(len, 0);
                v
            }
        }
    }
}

/// A Dense batch whose buffer returns to the reader's bin on drop.
struct Recycled {
    out: DenseOut,
    bin: Arc<Bin>,
}

impl DenseOutput for Recycled {
    fn bytes(&self) -> &[u8] {
        &self.out.bytes
    }
    fn shape(&self) -> &[u64] {
        &self.out.shape
    }
}

impl Drop for Recycled {
    fn drop(&mut self) {
        if let Ok(mut g) = self.bin.0.lock() {
            *g = Some(std::mem::take(&mut self.out.bytes));
        }
    }
}

/// A Ragged batch whose values buffer returns to the reader's bin on drop.
struct RecycledRagged {
    out: RaggedOut,
    bin: Arc<Bin>,
}

impl RaggedOutput for RecycledRagged {
    fn values(&self) -> &[u8] {
        &self.out.values
    }
    fn cu_seqlens(&self) -> &[i32] {
        &self.out.cu_seqlens
    }
    fn shapes(&self) -> &[u64] {
        &self.out.shapes
    }
}

impl Drop for RecycledRagged {
    fn drop(&mut self) {
        if let Ok(mut g) = self.bin.0.lock() {
            *g = Some(std::mem::take(&mut self.out.values));
        }
    }
}
