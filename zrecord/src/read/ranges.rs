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

/// The largest gap worth reading to save a request, for records `located` fetched with at most
/// `concurrency` requests in flight when one request costs as much as `request` bytes (its
/// latency, in bytes a connection would have moved meanwhile). The model: requests go out in
/// waves of `concurrency`, each wave costs one request's latency, and every byte fetched (gaps
/// included) costs its own time; merging the k smallest gaps between the records' stored bytes
/// saves requests (so waves) and adds those gaps' bytes, and the k that costs least is taken
/// (the most merges among equal costs: fewer requests for the same time). Scattered small
/// records thus go one request each while they fit in few waves, instead of pulling in the
/// hundreds of KiB between them; close ones still share requests.
#[cfg(feature = "remote")]
pub(super) fn cost_gap(located: &[(u32, Member<'_>)], request: u64, concurrency: usize) -> u64 {
    let mut spans: Vec<(u32, u64, u64)> = located
        .iter()
        .map(|(s, m)| {
            let a = m.entry.offset;
            (*s, a, a + u64::from(m.entry.stored_len))
        })
        .collect();
    spans.sort_unstable();
    let mut gaps = Vec::new();
    let mut ranges = 0u64;
    let mut at: Option<(u32, u64)> = None;
    for (s, a, b) in spans {
        match at {
            Some((shard, end)) if shard == s && a <= end => at = Some((s, end.max(b))),
            Some((shard, end)) if shard == s => {
                gaps.push(a - end);
                ranges += 1;
                at = Some((s, b));
            }
            _ => {
                ranges += 1;
                at = Some((s, b));
            }
        }
    }
    gaps.sort_unstable();
    let c = concurrency.max(1) as u64;
    let cost = |k: usize, added: u64| (ranges - k as u64).div_ceil(c) * request + added;
    let (mut best, mut best_cost, mut added) = (0, cost(0, 0), 0u64);
    for (k, g) in gaps.iter().enumerate() {
        added = added.saturating_add(*g);
        let t = cost(k + 1, added);
        if t <= best_cost {
            (best, best_cost) = (k + 1, t);
        }
    }
    if best == 0 { 0 } else { gaps[best - 1] }
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

#[cfg(all(test, feature = "remote"))]
mod tests {
    use super::*;

    /// Records of `len` bytes at `offsets` of shard 0, located into `out`.
    fn at<'o>(offsets: &[u64], len: u32, out: &'o mut [u8]) -> Vec<(u32, Member<'o>)> {
        let mut rest = out;
        offsets
            .iter()
            .enumerate()
            .map(|(k, &o)| {
                let (dst, tail) = std::mem::take(&mut rest).split_at_mut(len as usize);
                rest = tail;
                let entry = Entry {
                    offset: o,
                    stored_len: len,
                    ..Entry::ZERO
                };
                (
                    0,
                    Member {
                        i: k as u64,
                        entry,
                        dst,
                    },
                )
            })
            .collect()
    }

    /// A naive oracle: every k tried by merging the k smallest gaps, the cost recounted.
    fn oracle(offsets: &[u64], len: u64, request: u64, c: u64) -> u64 {
        let mut o = offsets.to_vec();
        o.sort_unstable();
        o.dedup();
        let mut gaps: Vec<u64> = o
            .windows(2)
            .map(|w| w[1] - w[0] - len.min(w[1] - w[0]))
            .collect();
        gaps.retain(|&g| g > 0);
        gaps.sort_unstable();
        let n = gaps.len() as u64 + 1;
        let mut best = (n.div_ceil(c) * request, 0u64);
        for k in 1..=gaps.len() {
            let t = (n - k as u64).div_ceil(c) * request + gaps[..k].iter().sum::<u64>();
            if t <= best.0 {
                best = (t, gaps[k - 1]);
            }
        }
        best.1
    }

    #[test]
    fn scattered_small_records_in_one_wave_merge_nothing() {
        // 256 records of 64 bytes spread over 64 MB, 32 in flight, a request worth 256 KiB:
        // merging never pays for its gaps, so each record is its own request.
        let offsets: Vec<u64> = (0..256u64)
            .map(|k| (k * 2_654_435_761) % (64 << 20))
            .collect();
        let mut out = vec![0u8; 256 * 64];
        let located = at(&offsets, 64, &mut out);
        let g = cost_gap(&located, 256 << 10, 32);
        assert_eq!(g, oracle(&offsets, 64, 256 << 10, 32));
        assert!(g < 64 << 10, "{g}");
        let ranges = merge(located, g, 8 << 20);
        let fetched: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        assert!(
            fetched < 64 * 256 * 4,
            "{} ranges, {fetched} bytes",
            ranges.len()
        );
    }

    #[test]
    fn close_records_share_requests() {
        // 256 records of 64 bytes 100 bytes apart: one request.
        let offsets: Vec<u64> = (0..256u64).map(|k| k * 164).collect();
        let mut out = vec![0u8; 256 * 64];
        let located = at(&offsets, 64, &mut out);
        let g = cost_gap(&located, 256 << 10, 32);
        assert_eq!(g, 100);
        assert_eq!(merge(located, g, 8 << 20).len(), 1);
    }

    #[test]
    fn the_chosen_gap_matches_the_oracle() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for case in 0..200u64 {
            let n = 1 + (case % 97) as usize;
            let span = 1 + (case * 7919) % (4 << 20);
            let offsets: Vec<u64> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % span) / 16 * 16
                })
                .collect();
            let c = 1 + case % 40;
            let request = 1 + (case * 104_729) % (512 << 10);
            let mut out = vec![0u8; n * 16];
            let located = at(&offsets, 16, &mut out);
            assert_eq!(
                cost_gap(&located, request, c as usize),
                oracle(&offsets, 16, request, c),
                "case {case}"
            );
        }
    }
}
