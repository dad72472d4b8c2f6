//! The loader tables' limit row (`memcpy-limit`): every record of the store held in memory, and
//! each drawn batch copied out of it with benchkit's copy limit (record by record, with the stores
//! a zrecord gather of that size uses, split into zrecord's byte-balanced pieces over the
//! process's threads) into a recycled buffer. No loader, no file, no checksum: what delivering the
//! same bytes costs at least on this machine, under the same protocol (the consumer holds a block
//! of batches, so buffers are recycled, never freed and faulted again).
//!
//! A leaf below `loader_table`: it imports nothing of the harness.

use benchkit::buffers::{Recycler, copy_of};
use benchkit::copy::{Kernel, copy_records, parallel_pieces};
use loaderx::StreamView;

use crate::error::Result;

/// The store's records in memory: bytes, and each record's byte range and shape words.
pub struct CopyLimit {
    bytes: Vec<u8>,
    /// Record `i` is `bytes[starts[i]..starts[i + 1]]`.
    starts: Vec<usize>,
    /// Ragged only: `ndim` shape words and the element size, else empty and 0.
    shapes: Vec<u64>,
    ndim: usize,
    itemsize: usize,
    ragged: bool,
    /// Buffers handed back by dropped batches (as many as were ever live at once).
    free: Recycler,
}

/// One batch of the limit row, in the loaders' contract: the records back to back, and for
/// Ragged the int32 `cu_seqlens` and shapes. Its buffer goes back to the free list on drop.
pub struct Copied {
    pub values: Vec<u8>,
    pub cu_seqlens: Vec<i32>,
    pub shapes: Vec<u64>,
    free: Recycler,
}

impl Drop for Copied {
    fn drop(&mut self) {
        self.free.give(std::mem::take(&mut self.values));
    }
}

impl CopyLimit {
    /// Reads every record of `view` into memory (one gather of all of them; untimed).
    pub fn load(view: &StreamView, n: u64) -> Result<CopyLimit> {
        let all: Vec<u64> = (0..n).collect();
        let b = view.gather(&all)?;
        let free = Recycler::default();
        match b {
            loaderx::Batch::Dense(d) => {
                let stride = d.bytes().len().checked_div(n as usize).unwrap_or(0);
                Ok(CopyLimit {
                    bytes: copy_of(d.bytes()),
                    starts: (0..=n as usize).map(|i| i * stride).collect(),
                    shapes: Vec::new(),
                    ndim: 0,
                    itemsize: 0,
                    ragged: false,
                    free,
                })
            }
            loaderx::Batch::Ragged(r) => {
                let cu = r.cu_seqlens();
                let total = *cu.last().unwrap_or(&0) as usize;
                let itemsize = r.values().len().checked_div(total).unwrap_or(1);
                Ok(CopyLimit {
                    bytes: copy_of(r.values()),
                    starts: cu.iter().map(|&c| c as usize * itemsize).collect(),
                    ndim: r.shapes().len().checked_div(n as usize).unwrap_or(0),
                    shapes: r.shapes().to_vec(),
                    itemsize,
                    ragged: true,
                    free,
                })
            }
        }
    }

    /// Copies records `idx` into a recycled buffer.
    pub fn copy(&self, idx: &[u64]) -> Copied {
        let nd = self.ndim;
        let mut out_starts = Vec::with_capacity(idx.len() + 1);
        out_starts.push(0usize);
        for &i in idx {
            let i = i as usize;
            let len = self.starts[i + 1] - self.starts[i];
            out_starts.push(out_starts[out_starts.len() - 1] + len);
        }
        let total = out_starts[idx.len()];
        let mut values = self.free.take(total);
        let record = |k: usize| {
            let i = idx[k] as usize;
            &self.bytes[self.starts[i]..self.starts[i + 1]]
        };
        let at = |k: usize| out_starts[k];
        // Byte-balanced pieces over the pool, as a fanned-out gather splits its output.
        copy_records(
            &mut values,
            idx.len(),
            &at,
            record,
            Kernel::AsGather,
            parallel_pieces(),
        );
        let (cu_seqlens, shapes) = if self.ragged {
            let isz = self.itemsize.max(1);
            let cu = out_starts.iter().map(|&s| (s / isz) as i32).collect();
            let mut sh = Vec::with_capacity(idx.len() * nd);
            for &i in idx {
                let i = i as usize;
                sh.extend_from_slice(&self.shapes[i * nd..(i + 1) * nd]);
            }
            (cu, sh)
        } else {
            (Vec::new(), Vec::new())
        };
        Copied {
            values,
            cu_seqlens,
            shapes,
            free: self.free.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use zrecord::{Codec, DType, DenseStore, DenseWriter, RaggedStore, RaggedWriter};

    fn pool() -> Arc<dyn zrecord::Allocator> {
        Arc::new(loaderx::PooledAllocator::new(64 << 20))
    }

    #[test]
    fn copies_equal_a_gather_and_buffers_are_recycled() {
        let dir = tempfile::tempdir().expect("tempdir");
        let n = 300u64;
        let data: Vec<u8> = (0..n as usize * 96).map(|k| (k * 31 % 251) as u8).collect();
        let p = dir.path().join("d");
        let mut w = DenseWriter::create(&p, DType::UInt8, &[96], Codec::Raw, Default::default())
            .expect("create");
        w.append(&data).expect("append");
        w.close().expect("close");
        let view = StreamView::Dense(DenseStore::open(&p).expect("open").bind(pool()));
        let limit = CopyLimit::load(&view, n).expect("load");
        let idx: Vec<u64> = (0..256).map(|k| (k * 7 + 3) % n).collect();
        let first_ptr = {
            let c = limit.copy(&idx);
            let want = view.gather(&idx).expect("gather");
            let loaderx::Batch::Dense(d) = want else {
                panic!("dense")
            };
            assert_eq!(c.values, d.bytes());
            c.values.as_ptr()
        };
        let again = limit.copy(&idx);
        assert_eq!(
            again.values.as_ptr(),
            first_ptr,
            "the dropped buffer is reused"
        );

        // Ragged: values, cu_seqlens and shapes as a gather gives them.
        let p = dir.path().join("r");
        let lens: Vec<usize> = (0..n as usize).map(|i| 1 + i * 13 % 40).collect();
        let mut cu = vec![0i32];
        for l in &lens {
            cu.push(cu[cu.len() - 1] + *l as i32);
        }
        let values: Vec<u8> = (0..cu[n as usize] as usize * 4).map(|k| k as u8).collect();
        let shapes: Vec<u64> = lens.iter().map(|&l| l as u64).collect();
        let mut w = RaggedWriter::create(&p, DType::Int32, 1, Codec::Raw, Default::default())
            .expect("create");
        w.append(&values, &cu, &shapes).expect("append");
        w.close().expect("close");
        let view = StreamView::Ragged(RaggedStore::open(&p).expect("open").bind(pool()));
        let limit = CopyLimit::load(&view, n).expect("load");
        let c = limit.copy(&idx);
        let loaderx::Batch::Ragged(r) = view.gather(&idx).expect("gather") else {
            panic!("ragged")
        };
        assert_eq!(c.values, r.values());
        assert_eq!(c.cu_seqlens, r.cu_seqlens());
        assert_eq!(c.shapes, r.shapes());
    }
}
