//! The block buffer of a store read in blocks ([`crate::Store::buffer_blocks`]; what a block
//! shuffle reads, `loaderx::sampler`'s `Mode::Block`). Block `b` is the records
//! `b * records .. (b + 1) * records` (the last one shorter). A gather copies its records out of
//! the blocks it touches; the blocks it lacks are fetched together by one gather of their records
//! (consecutive records: on object storage one range GET per shard run, locally one sequential
//! read), checked as every gather checks them, decoded, and kept.
//!
//! Bound: `blocks` blocks held, the least recently used dropped first, plus the blocks the
//! gathers in flight fetched beyond them (at most each gather's distinct blocks); a block holds
//! its records decoded (Dense: `records x record bytes`; Ragged: their values and one offset
//! per record). A gather that needs a block another gather is fetching waits for that fetch
//! (each fetches the blocks it claimed first, then waits: no gather waits while it holds a claim
//! another waits on), so concurrent workers fetch each block once. A published store never
//! changes, so a held block is never stale.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::error::{Error, Result};

/// What a store's block buffer holds and has done ([`crate::Store::block_buffer_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockBufferStats {
    /// Records per block.
    pub records: u64,
    /// Blocks held at most.
    pub blocks: usize,
    /// Blocks held now.
    pub held: usize,
    /// Decoded bytes held now.
    pub held_bytes: u64,
    /// Blocks fetched so far.
    pub fetched: u64,
    /// Records served from a block already held when the gather asked for it.
    pub hits: u64,
}

/// One block's records, decoded back to back.
struct Block {
    bytes: Vec<u8>,
    /// Each record's first byte in `bytes`, then the end (`records + 1` entries).
    starts: Vec<usize>,
}

/// The held blocks, each with the tick of its last use, and the blocks being fetched.
#[derive(Default)]
struct Held {
    map: HashMap<u64, (Arc<Block>, u64)>,
    pending: HashMap<u64, Arc<Pending>>,
    tick: u64,
    bytes: u64,
}

/// A store's block buffer.
pub(in crate::read) struct Window {
    records: u64,
    blocks: usize,
    held: Mutex<Held>,
    fetched: AtomicU64,
    hits: AtomicU64,
}

impl Window {
    /// A buffer of `blocks` blocks of `records` records.
    pub(in crate::read) fn new(records: u64, blocks: usize) -> Result<Window> {
        if records == 0 || blocks == 0 {
            return Err(Error::invalid(format!(
                "a block buffer holds at least one block of at least one record, not {blocks} \
                 blocks of {records} records"
            )));
        }
        Ok(Window {
            records,
            blocks,
            held: Mutex::new(Held::default()),
            fetched: AtomicU64::new(0),
            hits: AtomicU64::new(0),
        })
    }

    /// Records per block and blocks held at most.
    pub(in crate::read) fn shape(&self) -> (u64, usize) {
        (self.records, self.blocks)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // A panic while the lock was held cannot leave the map half-changed (each change is one
        // insert or remove): the data is still whole.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(in crate::read) fn stats(&self) -> BlockBufferStats {
        let h = self.lock();
        BlockBufferStats {
            records: self.records,
            blocks: self.blocks,
            held: h.map.len(),
            held_bytes: h.bytes,
            fetched: self.fetched.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
        }
    }

    /// Copies records `idx` of a store of `len` records into `out`, record `k` at `dst(k)`,
    /// from the blocks they lie in; `fetch(ids)` gathers the records `ids` (the missing blocks'
    /// records, in order) decoded back to back, with each one's first byte and the end. A block
    /// another gather is fetching is waited for, not fetched again (its fetch failing: fetched
    /// here).
    pub(in crate::read) fn fill(
        &self,
        len: u64,
        idx: &[u64],
        out: &mut [u8],
        dst: impl Fn(usize) -> Range<usize>,
        fetch: impl Fn(&[u64]) -> Result<(Vec<u8>, Vec<usize>)>,
    ) -> Result<()> {
        let mut wanted: Vec<u64> = idx.iter().map(|&i| i / self.records).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let mut got: HashMap<u64, Arc<Block>> = HashMap::with_capacity(wanted.len());
        let mut claims = Claims {
            w: self,
            blocks: Vec::new(),
        };
        let mut waits = Vec::new();
        {
            let mut h = self.lock();
            h.tick += 1;
            let tick = h.tick;
            for &b in &wanted {
                if let Some((block, used)) = h.map.get_mut(&b) {
                    *used = tick;
                    got.insert(b, block.clone());
                } else if let Some(p) = h.pending.get(&b) {
                    waits.push((b, p.clone()));
                } else {
                    let p = Arc::new(Pending::default());
                    h.pending.insert(b, p.clone());
                    claims.blocks.push((b, p));
                }
            }
        }
        let served = idx
            .iter()
            .filter(|&&i| got.contains_key(&(i / self.records)))
            .count();
        self.hits.fetch_add(served as u64, Ordering::Relaxed);
        if !claims.blocks.is_empty() {
            let mine: Vec<u64> = claims.blocks.iter().map(|(b, _)| *b).collect();
            let fetched = self.fetch_blocks(len, &mine, &fetch)?;
            for ((b, p), block) in claims.blocks.drain(..).zip(fetched) {
                p.finish(Some(block.clone()));
                got.insert(b, block);
            }
        }
        let mut again = Vec::new();
        for (b, p) in waits {
            match p.wait() {
                Some(block) => {
                    got.insert(b, block);
                }
                None => again.push(b),
            }
        }
        if !again.is_empty() {
            for (b, block) in again.iter().zip(self.fetch_blocks(len, &again, &fetch)?) {
                got.insert(*b, block);
            }
        }
        for (k, &i) in idx.iter().enumerate() {
            let (b, r) = (i / self.records, (i % self.records) as usize);
            let Some(block) = got.get(&b) else {
                return Err(Error::invalid(format!(
                    "internal: block {b} was not fetched"
                )));
            };
            let src = &block.bytes[block.starts[r]..block.starts[r + 1]];
            let place = dst(k);
            if src.len() != place.len() {
                return Err(Error::invalid(format!(
                    "internal: record {i} is {} bytes in its block, {} in the gather",
                    src.len(),
                    place.len()
                )));
            }
            out[place].copy_from_slice(src);
        }
        Ok(())
    }

    /// Fetches `blocks` by one `fetch` of their records, holds them (the least recently used
    /// past the bound dropped) and takes them off the pending list; returns them in order.
    fn fetch_blocks(
        &self,
        len: u64,
        blocks: &[u64],
        fetch: &impl Fn(&[u64]) -> Result<(Vec<u8>, Vec<usize>)>,
    ) -> Result<Vec<Arc<Block>>> {
        let spans: Vec<Range<u64>> = blocks
            .iter()
            .map(|&b| b * self.records..((b + 1) * self.records).min(len))
            .collect();
        let ids: Vec<u64> = spans.iter().flat_map(|s| s.clone()).collect();
        let (bytes, starts) = fetch(&ids)?;
        if starts.len() != ids.len() + 1 || starts.last() != Some(&bytes.len()) {
            return Err(Error::invalid(
                "internal: a block fetch returned other records than asked",
            ));
        }
        let mut first = 0;
        let mut out = Vec::with_capacity(blocks.len());
        let mut h = self.lock();
        h.tick += 1;
        let tick = h.tick;
        for (&b, s) in blocks.iter().zip(&spans) {
            let n = (s.end - s.start) as usize;
            let base = starts[first];
            let block = Arc::new(Block {
                bytes: bytes[base..starts[first + n]].to_vec(),
                starts: starts[first..=first + n]
                    .iter()
                    .map(|&x| x - base)
                    .collect(),
            });
            first += n;
            h.bytes += block.bytes.len() as u64;
            if let Some((old, _)) = h.map.insert(b, (block.clone(), tick)) {
                h.bytes -= old.bytes.len() as u64;
            }
            h.pending.remove(&b);
            out.push(block);
        }
        self.fetched
            .fetch_add(blocks.len() as u64, Ordering::Relaxed);
        while h.map.len() > self.blocks {
            let Some((&oldest, _)) = h.map.iter().min_by_key(|(_, (_, used))| *used) else {
                break;
            };
            if let Some((old, _)) = h.map.remove(&oldest) {
                h.bytes -= old.bytes.len() as u64;
            }
        }
        Ok(out)
    }
}

/// A block a gather is fetching: the gathers that need it too wait for it.
#[derive(Default)]
struct Pending {
    /// `Some(Some(block))` once fetched, `Some(None)` when the fetch failed.
    done: Mutex<Option<Option<Arc<Block>>>>,
    cv: Condvar,
}

impl Pending {
    fn finish(&self, block: Option<Arc<Block>>) {
        *self.done.lock().unwrap_or_else(|p| p.into_inner()) = Some(block);
        self.cv.notify_all();
    }

    /// The block, or `None` when its fetch failed.
    fn wait(&self) -> Option<Arc<Block>> {
        let mut g = self.done.lock().unwrap_or_else(|p| p.into_inner());
        while g.is_none() {
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        g.clone().flatten()
    }
}

/// The blocks a gather claimed to fetch: those it has not finished when it returns (an error, a
/// panic) are taken off the pending list and their waiters told to fetch them themselves.
struct Claims<'w> {
    w: &'w Window,
    blocks: Vec<(u64, Arc<Pending>)>,
}

impl Drop for Claims<'_> {
    fn drop(&mut self) {
        if self.blocks.is_empty() {
            return;
        }
        let mut h = self.w.lock();
        for (b, p) in self.blocks.drain(..) {
            h.pending.remove(&b);
            p.finish(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Record `i`: `i % 7 + 1` bytes of value `i as u8`.
    fn record(i: u64) -> Vec<u8> {
        vec![i as u8; (i % 7 + 1) as usize]
    }

    /// A fetch of those records that counts its calls in `calls`.
    fn fetch(calls: &Mutex<Vec<Vec<u64>>>, ids: &[u64]) -> Result<(Vec<u8>, Vec<usize>)> {
        calls.lock().unwrap().push(ids.to_vec());
        let mut bytes = Vec::new();
        let mut starts = vec![0];
        for &i in ids {
            bytes.extend(record(i));
            starts.push(bytes.len());
        }
        Ok((bytes, starts))
    }

    /// A gather of `idx` of a 50-record store through `w`, fetching with `f`.
    fn gather_with(
        w: &Window,
        idx: &[u64],
        f: impl Fn(&[u64]) -> Result<(Vec<u8>, Vec<usize>)>,
    ) -> Result<Vec<u8>> {
        let mut ends = Vec::new();
        let mut at = 0;
        for &i in idx {
            at += (i % 7 + 1) as usize;
            ends.push(at);
        }
        let mut out = vec![0u8; at];
        let start = |k: usize| if k == 0 { 0 } else { ends[k - 1] };
        w.fill(50, idx, &mut out, |k| start(k)..ends[k], f)?;
        Ok(out)
    }

    fn want(idx: &[u64]) -> Vec<u8> {
        idx.iter().flat_map(|&i| record(i)).collect()
    }

    #[test]
    fn gathers_copy_from_blocks_fetched_once_and_the_bound_holds() {
        let w = Window::new(8, 2).unwrap();
        let calls = Mutex::new(Vec::new());
        let gather = |idx: &[u64]| gather_with(&w, idx, |ids| fetch(&calls, ids)).unwrap();
        let idx = [3u64, 9, 4, 3];
        assert_eq!(gather(&idx), want(&idx));
        assert_eq!(calls.lock().unwrap()[0], (0..16).collect::<Vec<u64>>());
        // Held blocks are not fetched again; the last block is shorter.
        let idx = [0u64, 49, 48, 0];
        assert_eq!(gather(&idx), want(&idx));
        assert_eq!(calls.lock().unwrap()[1], (48..50).collect::<Vec<u64>>());
        let s = w.stats();
        assert_eq!((s.held, s.fetched, s.hits), (2, 3, 2));
        // Block 0 was used last with block 6; block 1 was dropped.
        let idx = [10u64];
        assert_eq!(gather(&idx), want(&idx));
        assert_eq!(calls.lock().unwrap().len(), 3);
        assert_eq!(w.stats().held, 2);
        assert!(Window::new(0, 1).is_err() && Window::new(1, 0).is_err());
    }

    /// A gather that needs a block another is fetching waits for it: one fetch serves both; when
    /// that fetch fails, the waiter fetches the block itself.
    #[test]
    fn concurrent_gathers_share_a_fetch_and_survive_its_failure() {
        for fail in [false, true] {
            let w = Window::new(8, 4).unwrap();
            let calls = Mutex::new(Vec::new());
            let (go, gate) = mpsc::channel::<()>();
            let gate = Mutex::new(gate);
            let idx = [5u64, 2, 12];
            std::thread::scope(|s| {
                let first = s.spawn(|| {
                    gather_with(&w, &idx, |ids| {
                        gate.lock().unwrap().recv().unwrap();
                        if fail {
                            return Err(Error::invalid("the first fetch fails"));
                        }
                        fetch(&calls, ids)
                    })
                });
                // The first gather has claimed its blocks and is held in its fetch.
                while w.lock().pending.len() < 2 {
                    std::thread::yield_now();
                }
                let second = s.spawn(|| gather_with(&w, &idx, |ids| fetch(&calls, ids)));
                go.send(()).unwrap();
                let (a, b) = (first.join().unwrap(), second.join().unwrap());
                assert_eq!(b.unwrap(), want(&idx));
                assert_eq!(a.is_err(), fail);
                // Served by the first fetch, or (it failed) by the second gather's own.
                assert_eq!(calls.lock().unwrap().len(), 1, "fail {fail}");
                assert!(w.lock().pending.is_empty());
            });
        }
    }
}
