//! The loader tables' limit row (`memcpy-limit`): every record of the store held in memory, and
//! for each drawn batch the same number of bytes copied out of it as one contiguous span (from
//! the batch's first record on, wrapping at the end) into a recycled buffer, by a pipeline shaped
//! like a loader's: one copying thread per core, each copying whole batches, at most `ahead`
//! batches done and waiting ([`CopyLimit::pipeline`]), handed to the consumer in completion
//! order. Each thread uses the faster of `memcpy` and the stores a zrecord gather of that size
//! uses, measured in this process before the timed loop. No loader, no file, no checksum, no
//! per-record work and no order to keep: every row of the table moves at least these bytes with
//! at least this work, so none is faster except by noise. It is a reference, not a delivery: its
//! bytes are not the batch's records (the cell does not compare them) and its row says
//! `verified: null`. The ragged contract's `cu_seqlens` and shapes are still built from the drawn
//! records, as a loader must.

use std::sync::mpsc::{Receiver, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use benchkit::buffers::{Recycler, copy_of};
use benchkit::copy::{Kernel, copy_span};
use loaderx::{IndexSampler, Sampler, StreamView};

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
    /// The copy the calibration kept (each copying thread copies whole batches).
    kernel: Kernel,
    /// Buffers handed back by dropped batches (as many as were ever live at once).
    free: Recycler,
}

/// One batch of the limit row, in the loaders' contract: the batch's byte count back to back,
/// and for Ragged the int32 `cu_seqlens` and shapes of the drawn records. Its buffer goes back to
/// the free list on drop.
pub struct Copied {
    pub values: Vec<u8>,
    // Built as a loader must build them (part of the row's work) and held with the batch; a
    // reference is never compared, so only the tests read them.
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "the ragged contract's work, never compared")
    )]
    pub cu_seqlens: Vec<i32>,
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "the ragged contract's work, never compared")
    )]
    pub shapes: Vec<u64>,
    free: Recycler,
}

impl Drop for Copied {
    fn drop(&mut self) {
        self.free.give(std::mem::take(&mut self.values));
    }
}

impl CopyLimit {
    /// Reads every record of `view` into memory (one gather of all of them; untimed), then
    /// measures the four copies on spans of one average batch of `batch` records and keeps the
    /// fastest.
    pub fn load(view: &StreamView, n: u64, batch: usize) -> Result<CopyLimit> {
        let all: Vec<u64> = (0..n).collect();
        let b = view.gather(&all)?;
        let free = Recycler::default();
        let mut limit = match b {
            loaderx::Batch::Dense(d) => {
                let stride = d.bytes().len().checked_div(n as usize).unwrap_or(0);
                CopyLimit {
                    bytes: copy_of(d.bytes()),
                    starts: (0..=n as usize).map(|i| i * stride).collect(),
                    shapes: Vec::new(),
                    ndim: 0,
                    itemsize: 0,
                    ragged: false,
                    kernel: Kernel::Memcpy,
                    free,
                }
            }
            loaderx::Batch::Ragged(r) => {
                let cu = r.cu_seqlens();
                let total = *cu.last().unwrap_or(&0) as usize;
                let itemsize = r.values().len().checked_div(total).unwrap_or(1);
                CopyLimit {
                    bytes: copy_of(r.values()),
                    starts: cu.iter().map(|&c| c as usize * itemsize).collect(),
                    ndim: r.shapes().len().checked_div(n as usize).unwrap_or(0),
                    shapes: r.shapes().to_vec(),
                    itemsize,
                    ragged: true,
                    kernel: Kernel::Memcpy,
                    free,
                }
            }
        };
        limit.calibrate(batch);
        limit.prefill(batch);
        Ok(limit)
    }

    /// The bytes of `batch` records of the store's average size (at least 1).
    fn average_batch_bytes(&self, batch: usize) -> usize {
        let n = self.starts.len().saturating_sub(1).max(1);
        (self.bytes.len() / n * batch).max(1)
    }

    /// Times both copies on spans of one average batch, on one thread (each copying thread of
    /// the pipeline copies whole batches), and keeps the faster: five rounds, each timing both in
    /// turn (at least 20 ms or 16 copies each, the spans starting at spread-out records), a
    /// copy's figure its best round, so a neighbour's burst on a shared machine slows one round
    /// of each alike rather than all rounds of one.
    fn calibrate(&mut self, batch: usize) {
        let n = self.starts.len().saturating_sub(1).max(1);
        let len = self.average_batch_bytes(batch).min(self.bytes.len());
        let mut out = self.free.take(len);
        let kernels = [Kernel::Memcpy, Kernel::AsGather];
        let mut fastest = [Duration::MAX; 2];
        for round in 0..5 {
            for (c, &kernel) in kernels.iter().enumerate() {
                let (mut done, t) = (0usize, Instant::now());
                while done < 16 || t.elapsed() < Duration::from_millis(20) {
                    let from = self.starts[(done * 7919 + round * 104_729) % n];
                    copy_span(&mut out, &self.bytes, from, kernel, 1);
                    done += 1;
                }
                fastest[c] = fastest[c].min(t.elapsed() / done as u32);
            }
        }
        self.free.give(out);
        self.kernel = if fastest[1] < fastest[0] {
            Kernel::AsGather
        } else {
            Kernel::Memcpy
        };
    }

    /// Puts as many buffers as a timed block holds at once (and two more) on the free list,
    /// faulted in, each with room for twice an average batch: a loader's pool regions are reused
    /// the same way, and a short timed loop must not time the first touch of fresh buffers (on a
    /// 50-batch dense run it was most of the row's time).
    fn prefill(&mut self, batch: usize) {
        let len = self.average_batch_bytes(batch);
        let room = if self.ragged { 2 * len } else { len };
        let bufs: Vec<Vec<u8>> = (0..crate::loader::arms::BLOCK + 2)
            .map(|_| self.free.take(room))
            .collect();
        for b in bufs {
            self.free.give(b);
        }
    }

    /// The copy the calibration kept, for the row's note.
    pub fn describe(&self) -> &'static str {
        match self.kernel {
            Kernel::Memcpy => "memcpy",
            Kernel::AsGather => "the stores a gather of that size uses",
        }
    }

    /// The pipeline: `threads` copying threads draw steps from `sampler` in turn, copy each
    /// step's batch ([`CopyLimit::copy`]) and hand it over through a channel that holds `ahead`
    /// batches, in completion order. The threads end when the receiver is dropped (their next
    /// hand-over fails) or the sampler fails.
    pub fn pipeline(
        self: Arc<Self>,
        sampler: IndexSampler,
        threads: usize,
        ahead: usize,
    ) -> Receiver<Copied> {
        let (tx, rx) = sync_channel(ahead);
        let sampler = Arc::new(Mutex::new(sampler));
        for _ in 0..threads.max(1) {
            let (tx, sampler, limit) = (tx.clone(), sampler.clone(), self.clone());
            std::thread::spawn(move || {
                loop {
                    let idx = {
                        let mut s = sampler.lock().unwrap_or_else(|e| e.into_inner());
                        match s.next() {
                            Ok(i) => i.to_vec(),
                            Err(_) => return,
                        }
                    };
                    if tx.send(limit.copy(&idx)).is_err() {
                        return;
                    }
                }
            });
        }
        rx
    }

    /// Copies as many bytes as records `idx` hold, as one span from record `idx[0]` on, into a
    /// recycled buffer; `cu_seqlens` and shapes are those of records `idx`.
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
        let from = idx.first().map_or(0, |&i| self.starts[i as usize]);
        copy_span(&mut values, &self.bytes, from, self.kernel, 1);
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
    fn copies_move_the_batch_bytes_and_buffers_are_recycled() {
        let dir = tempfile::tempdir().expect("tempdir");
        let n = 300u64;
        let data: Vec<u8> = (0..n as usize * 96).map(|k| (k * 31 % 251) as u8).collect();
        let p = dir.path().join("d");
        let mut w = DenseWriter::create(&p, DType::UInt8, &[96], Codec::Raw, Default::default())
            .expect("create");
        w.append(&data).expect("append");
        w.close().expect("close");
        let view = StreamView::Dense(DenseStore::open(&p).expect("open").bind(pool()));
        let limit = CopyLimit::load(&view, n, 256).expect("load");
        assert!(!limit.describe().is_empty());
        let idx: Vec<u64> = (0..256).map(|k| (k * 7 + 3) % n).collect();
        let first_ptr = {
            let c = limit.copy(&idx);
            // As many bytes as the records hold: the span from the first record on, wrapping.
            let from = idx[0] as usize * 96;
            let want: Vec<u8> = (0..256 * 96)
                .map(|k| data[(from + k) % data.len()])
                .collect();
            assert_eq!(c.values, want);
            assert!(c.cu_seqlens.is_empty() && c.shapes.is_empty());
            c.values.as_ptr()
        };
        // Batches taken and dropped one after another reuse the prefilled buffers: no new one.
        let mut seen = vec![first_ptr];
        for _ in 0..3 * crate::loader::arms::BLOCK {
            let again = limit.copy(&idx);
            if !seen.contains(&again.values.as_ptr()) {
                seen.push(again.values.as_ptr());
            }
        }
        assert!(
            seen.len() <= crate::loader::arms::BLOCK + 2,
            "{}",
            seen.len()
        );

        // Ragged: the batch's byte count, and cu_seqlens and shapes as a gather gives them.
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
        let limit = CopyLimit::load(&view, n, 256).expect("load");
        let c = limit.copy(&idx);
        let loaderx::Batch::Ragged(r) = view.gather(&idx).expect("gather") else {
            panic!("ragged")
        };
        assert_eq!(c.values.len(), r.values().len());
        assert_eq!(c.cu_seqlens, r.cu_seqlens());
        assert_eq!(c.shapes, r.shapes());
    }
}
