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
//! per record). Two gathers that miss one block at once both fetch it. A published store never
//! changes, so a held block is never stale.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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

/// The held blocks, each with the tick of its last use.
#[derive(Default)]
struct Held {
    map: HashMap<u64, (Arc<Block>, u64)>,
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
    /// records, in order) decoded back to back, with each one's first byte and the end.
    pub(in crate::read) fn fill(
        &self,
        len: u64,
        idx: &[u64],
        out: &mut [u8],
        dst: impl Fn(usize) -> Range<usize>,
        fetch: impl FnOnce(&[u64]) -> Result<(Vec<u8>, Vec<usize>)>,
    ) -> Result<()> {
        let mut wanted: Vec<u64> = idx.iter().map(|&i| i / self.records).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let mut got: HashMap<u64, Arc<Block>> = HashMap::with_capacity(wanted.len());
        let mut missing = Vec::new();
        {
            let mut h = self.lock();
            h.tick += 1;
            let tick = h.tick;
            for &b in &wanted {
                match h.map.get_mut(&b) {
                    Some((block, used)) => {
                        *used = tick;
                        got.insert(b, block.clone());
                    }
                    None => missing.push(b),
                }
            }
        }
        let served = idx
            .iter()
            .filter(|&&i| got.contains_key(&(i / self.records)))
            .count();
        self.hits.fetch_add(served as u64, Ordering::Relaxed);
        if !missing.is_empty() {
            let spans: Vec<Range<u64>> = missing
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
            let mut h = self.lock();
            h.tick += 1;
            let tick = h.tick;
            for (&b, s) in missing.iter().zip(&spans) {
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
                got.insert(b, block);
            }
            self.fetched
                .fetch_add(missing.len() as u64, Ordering::Relaxed);
            while h.map.len() > self.blocks {
                let Some((&oldest, _)) = h.map.iter().min_by_key(|(_, (_, used))| *used) else {
                    break;
                };
                if let Some((old, _)) = h.map.remove(&oldest) {
                    h.bytes -= old.bytes.len() as u64;
                }
            }
        }
        for (k, &i) in idx.iter().enumerate() {
            let (b, r) = (i / self.records, (i % self.records) as usize);
            let block = &got[&b];
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fetch of records whose record `i` is `i % 7 + 1` bytes of value `i as u8`.
    fn fetch(
        calls: &mut Vec<Vec<u64>>,
    ) -> impl FnOnce(&[u64]) -> Result<(Vec<u8>, Vec<usize>)> + '_ {
        move |ids| {
            calls.push(ids.to_vec());
            let mut bytes = Vec::new();
            let mut starts = vec![0];
            for &i in ids {
                bytes.extend(std::iter::repeat_n(i as u8, (i % 7 + 1) as usize));
                starts.push(bytes.len());
            }
            Ok((bytes, starts))
        }
    }

    fn gather(w: &Window, idx: &[u64], calls: &mut Vec<Vec<u64>>) -> Vec<u8> {
        let ends: Vec<usize> = idx
            .iter()
            .scan(0, |at, &i| {
                *at += (i % 7 + 1) as usize;
                Some(*at)
            })
            .collect();
        let mut out = vec![0u8; ends.last().copied().unwrap_or(0)];
        let start = |k: usize| if k == 0 { 0 } else { ends[k - 1] };
        w.fill(50, idx, &mut out, |k| start(k)..ends[k], fetch(calls))
            .unwrap();
        out
    }

    #[test]
    fn gathers_copy_from_blocks_fetched_once_and_the_bound_holds() {
        let w = Window::new(8, 2).unwrap();
        let mut calls = Vec::new();
        let want = |idx: &[u64]| -> Vec<u8> {
            idx.iter()
                .flat_map(|&i| std::iter::repeat_n(i as u8, (i % 7 + 1) as usize))
                .collect()
        };
        let idx = [3u64, 9, 4, 3];
        assert_eq!(gather(&w, &idx, &mut calls), want(&idx));
        assert_eq!(calls, vec![(0..16).collect::<Vec<u64>>()]);
        // Held blocks are not fetched again; the last block is shorter.
        let idx = [0u64, 49, 48, 0];
        assert_eq!(gather(&w, &idx, &mut calls), want(&idx));
        assert_eq!(calls[1], (48..50).collect::<Vec<u64>>());
        let s = w.stats();
        assert_eq!((s.held, s.fetched, s.hits), (2, 3, 2));
        // Block 0 was used last with block 6; block 1 was dropped.
        let idx = [10u64];
        assert_eq!(gather(&w, &idx, &mut calls), want(&idx));
        assert_eq!(calls.len(), 3);
        assert_eq!(w.stats().held, 2);
        assert!(Window::new(0, 1).is_err() && Window::new(1, 0).is_err());
    }
}
