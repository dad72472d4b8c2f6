//! The read engines and the one place that picks one for a gather.
//!
//! A gather's records reach its output through exactly one engine, chosen once per gather by
//! [`gather_into`] (never per record):
//!
//! * [`warm`]: copies from the memory-mapped shards (resident records, and cold ones the policy
//!   has asked the kernel to read ahead);
//! * [`direct`]: reads a cold batch of raw records past the page cache with blocking readers;
//! * [`uring`] (Linux): the same reads queued on an io_uring from the calling thread;
//! * [`positional`]: every gather of an unmapped store (a shared or network file system), read
//!   as coalesced ranges with positional reads;
//! * `remote` (feature `remote`): every gather of a store opened from a URL, its coalesced ranges
//!   fetched from the object store with a bounded number of requests in flight.
//!
//! Every engine implements [`ReadEngine`] (`read::plan`): it locates records through the
//! container, fetches their bytes its own way, checks them and writes them into their place in
//! the output. Engines share the non-engine modules of `read` (`plan`, `piece`, `decode`,
//! `hint`, `fan_out`) and never import one another (a test, `tests/read_layout.rs`, reads these
//! files and fails if one does). Adding an engine (a remote object store, say) is one new module
//! here implementing [`ReadEngine`], one variant of [`Engine`] with its arm in [`gather_into`],
//! and the line of [`choose`] that picks it.

mod direct;
mod positional;
#[cfg(feature = "remote")]
mod remote;
#[cfg(all(feature = "remote", feature = "internals"))]
pub(in crate::read) use remote::requests as remote_requests;
#[cfg(target_os = "linux")]
mod uring;
mod warm;

use crate::crc::Stores;
use crate::error::Result;
use crate::format::Codec;

use super::cold::{AcrossCold, before_gather, before_gather_across};
use super::container::{ColdReads, Container};
use super::fan_out;
use super::plan::{AcrossParts, Plan, ReadEngine, stores_for};

/// A cold batch reads its records directly when they average at least this many bytes (or
/// when reads are queued on io_uring, whatever their size); smaller ones are requested with
/// read-ahead and copied through the map, which keeps more of them in flight than 16 blocking
/// readers do.
const MIN_MEAN_BYTES: usize = 32 << 10;

/// The engine of one gather. It lives on the stack for that gather alone: boxing the ring
/// variant to shrink the others would allocate on every gather.
#[allow(clippy::large_enum_variant)]
enum Engine {
    Warm(warm::Warm),
    Direct(direct::Direct),
    Positional(positional::Positional),
    #[cfg(feature = "remote")]
    Remote(remote::RemoteEngine),
    #[cfg(target_os = "linux")]
    Uring(uring::Ring),
}

/// Fills `out` with records `idx` of `c`, record k at `out[offsets(k)..offsets(k + 1)]`, through
/// the engine [`choose`] picks for this gather.
pub(super) fn gather_into<F: Fn(usize) -> usize + Sync>(
    c: &Container,
    idx: &[u64],
    out: &mut [u8],
    offsets: &F,
) -> Result<()> {
    if idx.is_empty() {
        return Ok(());
    }
    // A large container's index pages are checked when first needed, before any entry is used.
    let _index = c.check_pages(idx)?;
    let total = out.len();
    let plan = Plan {
        idx,
        offsets,
        stores: stores_for(total),
    };
    let done = match choose(c, idx, total) {
        Engine::Warm(e) => e.gather_into(c, &plan, out),
        Engine::Direct(e) => e.gather_into(c, &plan, out),
        Engine::Positional(e) => e.gather_into(c, &plan, out),
        #[cfg(feature = "remote")]
        Engine::Remote(e) => e.gather_into(c, &plan, out),
        #[cfg(target_os = "linux")]
        Engine::Uring(e) => e.gather_into(c, &plan, out),
    };
    // A map that met a file shorter than itself read zeros, not records: that is the error to
    // report, whatever the engine made of the zeros.
    c.check_faults()?;
    done.map_err(|e| c.explain(e))
}

/// Whether a gather of `total` output bytes from container `c` may be read by
/// [`gather_across`]: a mapped, local, verified raw container, and an output small enough to be
/// copied by the calling thread with ordinary stores (a larger one fans out over the pool through
/// [`gather_into`]).
pub(in crate::read) fn across_suits(c: &Container, total: usize) -> bool {
    #[cfg(feature = "remote")]
    if c.remote().is_some() {
        return false;
    }
    c.mapped()
        && c.verifies()
        && c.codec() == Codec::Raw
        && total < fan_out::PARALLEL_BYTES
        && stores_for(total) == Stores::Cached
}

/// Fills `out` with records from several containers in one pass (a random batch over a
/// dataset's parts): record k is record `local[k]` of `parts[slot[k]]`, at
/// `out[offsets(k)..offsets(k + 1)]`. Every container must suit ([`across_suits`]). The
/// dataset's cold-read policy (`cold`) decides for the whole batch whether its records are
/// requested before the copy; then the warm engine's grouped copy-then-check reads them, one
/// record after another in output order, whichever part each lies in: no per-part call, no
/// scratch copy.
pub(in crate::read) fn gather_across<F: Fn(usize) -> usize>(
    parts: &[&Container],
    slot: &[u32],
    local: &[u64],
    out: &mut [u8],
    offsets: &F,
    cold: &AcrossCold,
) -> Result<()> {
    // A part whose index pages are not all checked yet (or are read by page) has its records'
    // pages checked (and held) before their entries are read: each part's records together, by
    // a counting sort on the slot.
    let mut guards = Vec::new();
    if parts.iter().any(|c| !c.index_ready()) {
        let mut starts = vec![0usize; parts.len() + 1];
        for &s in slot {
            starts[s as usize + 1] += 1;
        }
        for s in 0..parts.len() {
            starts[s + 1] += starts[s];
        }
        let mut next = starts.clone();
        let mut grouped = vec![0u64; local.len()];
        for (&s, &i) in slot.iter().zip(local) {
            grouped[next[s as usize]] = i;
            next[s as usize] += 1;
        }
        for (s, c) in parts.iter().enumerate() {
            guards.push(c.check_pages(&grouped[starts[s]..starts[s + 1]])?);
        }
    }
    let maps: Vec<_> = parts.iter().map(|c| c.maps()).collect();
    let recs: Vec<_> = slot
        .iter()
        .zip(local)
        .map(|(&s, &i)| (parts[s as usize], &maps[s as usize], i))
        .collect();
    let src = AcrossParts { recs: &recs };
    before_gather_across(&src, cold);
    let done = warm::read_grouped(&src, out, offsets);
    drop(guards);
    // A map that met a file shorter than itself read zeros, not records (as in `gather_into`);
    // while the process has caught no such fault in any map, no part has one to report.
    if crate::sigbus::caught() != 0 {
        for c in parts {
            c.check_faults()?;
        }
    }
    done
}

/// The engine for a gather of `idx` into `total` output bytes: the cold-read policy
/// (`read::cold`) decides whether the batch is read past the page cache (it issues any
/// read-ahead requests itself); such a batch goes to this thread's io_uring where the kernel
/// gives one, else to the blocking readers; every other batch is copied from the map. An unmapped
/// store's batches all go to the positional engine.
fn choose(c: &Container, idx: &[u64], total: usize) -> Engine {
    #[cfg(feature = "remote")]
    if c.remote().is_some() {
        return Engine::Remote(remote::RemoteEngine);
    }
    if !c.mapped() {
        return Engine::Positional(positional::Positional);
    }
    if !before_gather(c, idx, total, |records, total| {
        direct_suits(c, records, total)
    }) {
        return Engine::Warm(warm::Warm);
    }
    #[cfg(target_os = "linux")]
    if !blocking_readers_forced()
        && let Some(ring) = uring::Ring::take()
    {
        return Engine::Uring(ring);
    }
    Engine::Direct(direct::Direct)
}

/// Whether a cold batch of `records` records and `total` output bytes is read directly: a raw
/// container that is larger than memory (by [`ColdReads::Always`], or by its size under `Auto`),
/// records of at least [`MIN_MEAN_BYTES`] on average or reads queued on io_uring, and direct
/// reads available on every shard.
fn direct_suits(c: &Container, records: usize, total: usize) -> bool {
    c.codec() == Codec::Raw
        && (c.cold_reads() == ColdReads::Always || c.outgrows_memory())
        && records > 0
        && (total / records >= MIN_MEAN_BYTES || ring_reads())
        && c.all_shards_direct()
}

/// Whether direct reads are queued on an io_uring in this process (so small records, too, are
/// read directly: one thread keeps a whole batch of them in flight).
fn ring_reads() -> bool {
    #[cfg(target_os = "linux")]
    return uring::available();
    #[cfg(not(target_os = "linux"))]
    false
}

#[cfg(feature = "mutations")]
thread_local! {
    static BLOCKING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the direct reads of its gathers (on the calling thread) made by blocking readers
/// even where io_uring is available, so tests reach both engines. Test builds only (the
/// `mutations` feature).
#[cfg(feature = "mutations")]
#[doc(hidden)]
pub fn with_blocking_direct_reads<R>(f: impl FnOnce() -> R) -> R {
    let was = BLOCKING.replace(true);
    let r = f();
    BLOCKING.set(was);
    r
}

#[cfg(target_os = "linux")]
fn blocking_readers_forced() -> bool {
    #[cfg(feature = "mutations")]
    return BLOCKING.get();
    #[cfg(not(feature = "mutations"))]
    false
}
