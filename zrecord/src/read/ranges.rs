//! A gather's records as byte ranges of their shards, for the engines that fetch stored bytes
//! instead of reading them through a map (`read::engine`'s positional engine; an object store's
//! later): the records are located through the index, grouped by shard, sorted by offset and
//! merged into ranges (neighbours closer than a gap share one read), each record carrying its own
//! place in the output. [`decode_range`] then checks and decodes every record of a fetched range
//! into that place, exactly as the mapped engines do.

use crate::crc::Stores;
use crate::error::Result;
use crate::format::Entry;

use super::container::Container;
use super::decode::{Decoder, decode_located};

/// One record of a [`Range`]: its index, entry and place in the output.
pub(super) struct Member<'o> {
    pub(super) i: u64,
    pub(super) entry: Entry,
    pub(super) dst: &'o mut [u8],
}

/// Bytes `start..end` of shard `shard`, holding the stored bytes of every one of `members`.
pub(super) struct Range<'o> {
    pub(super) shard: u32,
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) members: Vec<Member<'o>>,
}

impl Range<'_> {
    /// The range's length in bytes.
    pub(super) fn len(&self) -> usize {
        (self.end - self.start) as usize
    }
}

/// The records `idx` (record k into `out[offsets(k)..offsets(k + 1)]`) as ranges of their shards:
/// records of one shard whose stored bytes lie at most `gap` bytes apart share a range while it
/// spans at most `max_span` bytes (a record longer than that is a range of its own). Duplicate
/// records share their bytes. Ranges come out in (shard, offset) order.
pub(super) fn coalesce<'o, F: Fn(usize) -> usize>(
    c: &Container,
    idx: &[u64],
    out: &'o mut [u8],
    offsets: &F,
    gap: u64,
    max_span: u64,
) -> Vec<Range<'o>> {
    merge(locate(c, idx, out, offsets), gap, max_span)
}

/// The records `idx`, each with its shard and its place in the output (record k into
/// `out[offsets(k)..offsets(k + 1)]`), in the order of `idx`.
pub(super) fn locate<'o, F: Fn(usize) -> usize>(
    c: &Container,
    idx: &[u64],
    out: &'o mut [u8],
    offsets: &F,
) -> Vec<(u32, Member<'o>)> {
    let index = c.index_bytes();
    let mut located: Vec<(u32, Member<'o>)> = Vec::with_capacity(idx.len());
    let mut rest = out;
    for (k, &i) in idx.iter().enumerate() {
        let (dst, tail) = std::mem::take(&mut rest).split_at_mut(offsets(k + 1) - offsets(k));
        rest = tail;
        let (shard, entry) = c.indexed_entry(index, i);
        located.push((shard, Member { i, entry, dst }));
    }
    located
}

/// Located records merged into ranges as [`coalesce`] merges them.
pub(super) fn merge(
    mut located: Vec<(u32, Member<'_>)>,
    gap: u64,
    max_span: u64,
) -> Vec<Range<'_>> {
    located.sort_unstable_by_key(|(s, m)| (*s, m.entry.offset));
    let mut ranges: Vec<Range<'_>> = Vec::new();
    for (shard, m) in located {
        let (a, b) = (
            m.entry.offset,
            m.entry.offset + u64::from(m.entry.stored_len),
        );
        if let Some(r) = ranges.last_mut()
            && r.shard == shard
            && a <= r.end + gap
            && b.max(r.end) - r.start <= max_span
        {
            r.end = r.end.max(b);
            r.members.push(m);
            continue;
        }
        ranges.push(Range {
            shard,
            start: a,
            end: b,
            members: vec![m],
        });
    }
    ranges
}

/// Checks and decodes every record of `r` from `bytes` (the range's stored bytes, fetched) into
/// its place in the output, as the store verifies; raw records are copied with `stores`.
pub(super) fn decode_range(
    c: &Container,
    r: &mut Range<'_>,
    bytes: &[u8],
    dec: &mut Decoder<'_>,
    stores: Stores,
) -> Result<()> {
    for m in &mut r.members {
        let at = (m.entry.offset - r.start) as usize;
        let stored = &bytes[at..at + m.entry.stored_len as usize];
        decode_located(
            c,
            m.i,
            (r.shard, m.entry, stored),
            m.dst,
            dec,
            c.verifies(),
            stores,
        )?;
    }
    Ok(())
}
