//! Cold gathers: a gather whose records are not in the page cache asks the device for all of them
//! at once before the copy starts, so the device works on the whole batch in parallel instead of
//! one synchronous page fault at a time. Implements the [`ColdReads`] policy an [`OpenOptions`]
//! carries: the residency probe that decides when the path engages, and the read-ahead requests.
//!
//! Two ways to read a cold batch. Small records (under 32 KiB on average, or compressed ones) are
//! requested with `MADV_WILLNEED` and then copied by the warm engine's fused copy + CRC loop,
//! whose page faults wait for reads already in flight. Large raw records are read past the page
//! cache with `O_DIRECT`, several reads in flight, and copied + checksummed from the read buffer
//! by the same kernel (the direct engines of `read::engine`, which decides with
//! [`before_gather`]). Either way the caller receives bytes verified exactly as on a warm
//! gather.
//!
//! [`OpenOptions`]: super::container::OpenOptions

use rayon::prelude::*;

use std::sync::atomic::AtomicU32;

use crate::threads::{cores, in_parallel};

use super::container::{ColdReads, Container, Maps};
use super::hint::{page_size, resident, will_need};
use super::plan::AcrossParts;

/// Gathers of fewer records than this skip the probe: one record read ahead of its own fault
/// gains nothing.
const MIN_RECORDS: usize = 2;
/// How many of a batch's records the `Auto` probe looks at (spread evenly over the batch).
const PROBES: usize = 2;
/// Under [`ColdReads::Auto`], a store that fits in memory whose last `WARM_STREAK` gathers were
/// all found resident is probed on every [`REPROBE_EVERY`]-th gather only: each probe is up to two
/// `mincore` calls, ~4 % of a 256-record gather of 2 KiB records from memory (harness cells,
/// docs/performance.md), and such a store stays resident once read. A probe that finds a batch
/// cold starts the streak again. A store that outgrows memory is probed on every gather.
const WARM_STREAK: u32 = 8;
/// See [`WARM_STREAK`].
const REPROBE_EVERY: u32 = 16;
/// Whether an `Auto` gather probes, after `warm` consecutive resident gathers of a store that does
/// or does not outgrow memory.
fn probes(warm: u32, outgrows_memory: bool) -> bool {
    outgrows_memory || warm < WARM_STREAK || warm.is_multiple_of(REPROBE_EVERY)
}

/// Batches of at least this many records issue their read requests from several threads.
const PARALLEL_REQUESTS: usize = 64;

/// What the probe found.
struct Probe {
    index_cold: bool,
    data_cold: bool,
}

/// The hook a gather of `idx` into `total` output bytes calls before copying: under the
/// store's policy, when the batch looks cold, either issues read-ahead requests for every
/// record (and the gather then copies through the map), or, when `direct_suits` says the batch
/// may be read past the page cache (asked only of a cold batch), requests only the cold index
/// pages and returns `true`: the gather then reads the records directly.
pub(super) fn before_gather(
    c: &Container,
    idx: &[u64],
    total: usize,
    direct_suits: impl FnOnce(usize, usize) -> bool,
) -> bool {
    let Some(probe) = decide(
        c.cold_reads(),
        idx.len(),
        c.warm_gathers(),
        c.outgrows_memory(),
        || !index_resident(c, idx[0]),
        || probe(c, idx),
    ) else {
        return false;
    };
    let maps = c.maps();
    if probe.index_cold {
        request_index(c, &maps, idx);
    }
    if probe.data_cold && direct_suits(idx.len(), total) {
        return true;
    }
    request_records(c, &maps, idx);
    false
}

/// A dataset's gather-wide cold-read state: the policy its parts were opened with, its count of
/// consecutive resident gathers, and whether its parts together outgrow memory.
pub(in crate::read) struct AcrossCold {
    pub(in crate::read) policy: ColdReads,
    pub(in crate::read) warm: AtomicU32,
    pub(in crate::read) outgrows_memory: bool,
}

/// [`before_gather`] for a gather across a dataset's parts (`src`), whose share of each part may
/// be one record (a random batch over thousands of parts). The policy is the dataset's, applied to
/// the whole batch: the probe looks at [`PROBES`] records spread over the batch, and a cold batch
/// requests the index entries and stored bytes of every record, whichever part it lies in,
/// before the copy starts, instead of faulting them in one at a time. The records are then copied
/// through the map (gathers that come here hold small records: never a direct read).
pub(in crate::read) fn before_gather_across(src: &AcrossParts<'_, '_>, cold: &AcrossCold) {
    let recs = src.recs;
    let spread = || {
        let mut p = Probe {
            index_cold: false,
            data_cold: false,
        };
        for &(c, _, i) in recs.iter().step_by(recs.len().div_ceil(PROBES)) {
            let one = probe(c, &[i]);
            p.index_cold |= one.index_cold;
            p.data_cold |= one.data_cold;
            if p.data_cold {
                break;
            }
        }
        p
    };
    let Some(probe) = decide(
        cold.policy,
        recs.len(),
        &cold.warm,
        cold.outgrows_memory,
        || !index_resident(recs[0].0, recs[0].2),
        spread,
    ) else {
        return;
    };
    let request = |part: &[(&Container, &Maps<'_>, u64)]| {
        for &(c, maps, i) in part {
            if probe.index_cold && !c.index_in_memory() {
                will_need(c.entry_bytes(maps.index, i));
            }
            will_need(c.locate(maps, i).2);
        }
    };
    if recs.len() >= PARALLEL_REQUESTS && cores() > 1 {
        let part = recs.len().div_ceil(cores());
        in_parallel(|| recs.par_chunks(part).for_each(request));
    } else {
        request(recs);
    }
}

/// What a gather of `n` records does under `policy`, for one container or a dataset's batch
/// across parts: `None` when it copies as it is, else what looks cold. `warm` counts the store's
/// consecutive resident gathers (threads race on it harmlessly: it only decides read-ahead) and
/// `outgrows` says whether the store outgrows memory (see [`probes`]); `Always` asks
/// `first_index_cold` of the batch, `Auto` runs `probe` when it probes.
fn decide(
    policy: ColdReads,
    n: usize,
    warm: &AtomicU32,
    outgrows: bool,
    first_index_cold: impl FnOnce() -> bool,
    probe: impl FnOnce() -> Probe,
) -> Option<Probe> {
    use std::sync::atomic::Ordering::Relaxed;
    let p = match policy {
        ColdReads::Never => return None,
        ColdReads::Always if n == 0 => return None,
        ColdReads::Always => Probe {
            index_cold: first_index_cold(),
            data_cold: true,
        },
        ColdReads::Auto if n < MIN_RECORDS => return None,
        ColdReads::Auto => {
            let w = warm.load(Relaxed);
            if !probes(w, outgrows) {
                warm.store(w.wrapping_add(1), Relaxed);
                return None;
            }
            let p = probe();
            let cold = p.data_cold || p.index_cold;
            warm.store(if cold { 0 } else { w.wrapping_add(1) }, Relaxed);
            p
        }
    };
    (p.data_cold || p.index_cold).then_some(p)
}

fn index_resident(c: &Container, i: u64) -> bool {
    if c.index_in_memory() {
        return true;
    }
    resident(&c.entry_bytes(c.index_bytes(), i)[..1])
}

/// Residency of the index entry and first stored page of `PROBES` records of `idx` (evenly
/// spread): one `mincore` each while they are resident, none past the first cold one.
fn probe(c: &Container, idx: &[u64]) -> Probe {
    let maps = c.maps();
    let step = idx.len().div_ceil(PROBES).max(1);
    let mut p = Probe {
        index_cold: false,
        data_cold: false,
    };
    for &i in idx.iter().step_by(step) {
        if !index_resident(c, i) {
            p.index_cold = true;
            p.data_cold = true;
            break;
        }
        let (_, _, stored) = c.locate(&maps, i);
        if !stored.is_empty() && !resident(&stored[..1]) {
            p.data_cold = true;
            break;
        }
    }
    p
}

/// Requests the index pages holding the entries of `idx`, so that reading the entries waits
/// for one round of parallel reads, not one read per record.
fn request_index(c: &Container, maps: &Maps<'_>, idx: &[u64]) {
    let page = page_size();
    let mut last_page = usize::MAX;
    for &i in idx {
        let entry = c.entry_bytes(maps.index, i);
        let first = entry.as_ptr() as usize / page;
        let last = (entry.as_ptr() as usize + entry.len() - 1) / page;
        if first != last_page || last != last_page {
            will_need(entry);
            last_page = last;
        }
    }
}

/// Requests every record's stored bytes (after [`request_index`] when the index is
/// cold too). Batches of at least `PARALLEL_REQUESTS` records spread the requests (each a
/// system call that allocates pages and queues a read) over the pool's threads.
fn request_records(c: &Container, maps: &Maps<'_>, idx: &[u64]) {
    let request = |part: &[u64]| {
        for &i in part {
            will_need(c.locate(maps, i).2);
        }
    };
    if idx.len() >= PARALLEL_REQUESTS && cores() > 1 {
        let part = idx.len().div_ceil(cores());
        in_parallel(|| idx.par_chunks(part).for_each(request));
    } else {
        request(idx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resident_store_is_probed_every_time_at_first_then_now_and_then() {
        for warm in 0..WARM_STREAK {
            assert!(probes(warm, false), "{warm}");
        }
        let probed: Vec<u32> = (WARM_STREAK..WARM_STREAK + 4 * REPROBE_EVERY)
            .filter(|&w| probes(w, false))
            .collect();
        assert_eq!(probed.len(), 4, "{probed:?}");
        assert!(probed.windows(2).all(|p| p[1] - p[0] == REPROBE_EVERY));
        // A store larger than memory is probed on every gather.
        assert!((0..1000).all(|w| probes(w, true)));
    }
}
