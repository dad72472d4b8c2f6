//! Direct reads of a cold batch through io_uring: the calling thread queues the reads of every
//! piece of the batch (up to [`MAX_DEPTH`] at once, bounded by [`ARENA_BYTES`] of bounce space),
//! and copies + checksums each piece out of its bounce slot as its read completes, so the device
//! sees the whole batch at once without a thread per outstanding read. Where the kernel refuses a
//! ring (no io_uring, `kernel.io_uring_disabled`, a seccomp filter), [`Ring::take`] says so once
//! and the gather uses blocking readers instead (`read::engine` chooses; that engine is
//! `engine/direct.rs`). Pieces and the record checks assembled from them are shared with it
//! through [`crate::read::piece`].
//!
//! Memory: one ring of [`ENTRIES`] entries per thread that has made such a gather (about 30 KiB
//! of shared ring memory each), and one bounce arena of at most [`ARENA_BYTES`] (plus 4 KiB) per
//! gather in progress; finished arenas are kept for later gathers up to [`KEEP_BYTES`]
//! process-wide.

use std::cell::RefCell;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

use io_uring::{IoUring, opcode, types};

use crate::crc::Stores;
use crate::error::{Error, Result};
use crate::vfs::DIRECT_ALIGN;

use crate::read::container::Container;
use crate::read::piece::{
    Piece, PieceSum, copy_piece, piece_extent, piece_read_error, piece_through_map, read_at_least,
    read_pieces,
};
use crate::read::plan::{Offsets, Plan, ReadEngine};

/// Submission-queue entries of a ring (its completion queue has twice as many).
const ENTRIES: u32 = 256;
/// Most reads one gather keeps in flight.
const MAX_DEPTH: usize = ENTRIES as usize;
/// Most bounce bytes one gather holds: the depth is cut to fit (15 slots of 1 MiB + 4 KiB, 256 of
/// 64 KiB).
const ARENA_BYTES: usize = 16 << 20;
/// Reads are queued while fewer than [`MIN_DEPTH`] are in flight or their bytes stay within this,
/// so small records are all in flight at once while large ones do not crowd the device (measured
/// on 147 KiB records, 2026-12-03: 1 MiB in flight, 4 reads, was 0.7x of 2 MiB; 4 MiB, 24 reads,
/// no better).
const BYTES_IN_FLIGHT: usize = 2 << 20;
/// Reads kept in flight whatever their size: the depth of the blocking readers, which a batch of
/// large pieces needs to keep the device busy while its last pieces finish (8, 16 and 24 could not
/// be told apart on this VM's disk in alternating cells; 16 had the best full-table runs).
const MIN_DEPTH: usize = 16;
/// Bounce arenas kept between gathers, process-wide, in bytes.
const KEEP_BYTES: usize = 16 << 20;

/// Whether this process can create a ring: 0 not yet known, 1 yes, 2 no.
static STATE: AtomicU8 = AtomicU8::new(0);

thread_local! {
    static KEPT: RefCell<Option<Ring>> = const { RefCell::new(None) };
}

/// A thread's ring, taken out of its slot for one gather: the io_uring engine.
pub(super) struct Ring {
    ring: IoUring,
    /// The process that created the ring: a forked child shares its memory with the parent and
    /// must not use it.
    pid: u32,
    /// Set when the ring may still have reads in flight that nobody will reap; it is then closed
    /// instead of kept.
    broken: bool,
}

impl Ring {
    /// This thread's ring (created on first use), or `None` where the kernel refuses io_uring.
    pub(super) fn take() -> Option<Ring> {
        if STATE.load(Ordering::Relaxed) == 2 {
            return None;
        }
        let pid = std::process::id();
        if let Some(r) = KEPT.with(|k| k.borrow_mut().take())
            && r.pid == pid
        {
            return Some(r);
        }
        match IoUring::new(ENTRIES) {
            Ok(ring) => {
                STATE.store(1, Ordering::Relaxed);
                Some(Ring {
                    ring,
                    pid,
                    broken: false,
                })
            }
            Err(_) => {
                STATE.store(2, Ordering::Relaxed);
                None
            }
        }
    }

    /// Puts the ring back for this thread's next gather.
    pub(super) fn keep(self) {
        if !self.broken {
            KEPT.with(|k| *k.borrow_mut() = Some(self));
        }
    }
}

/// Whether direct reads go through io_uring in this process (creates this thread's ring).
pub(super) fn available() -> bool {
    match STATE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => Ring::take().map(Ring::keep).is_some(),
    }
}

/// Kept bounce arenas. Only ever `try_lock`ed: a contended (or, in a forked child, orphaned) lock
/// means a fresh arena, never a wait.
static ARENAS: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// An arena of at least `bytes` bytes past its first [`DIRECT_ALIGN`] boundary.
fn take_arena(bytes: usize) -> Vec<u8> {
    let need = bytes + DIRECT_ALIGN;
    if let Ok(mut kept) = ARENAS.try_lock()
        && let Some(at) = kept.iter().position(|a| a.len() >= need)
    {
        return kept.swap_remove(at);
    }
    vec![0u8; need]
}

fn keep_arena(a: Vec<u8>) {
    if let Ok(mut kept) = ARENAS.try_lock() {
        let held: usize = kept.iter().map(Vec::len).sum();
        if held + a.len() <= KEEP_BYTES + 2 * DIRECT_ALIGN {
            kept.push(a);
        }
    }
}

impl ReadEngine for Ring {
    /// The first failure stops new reads; the ones in flight are reaped before it is returned.
    fn gather_into<F: Offsets>(
        mut self,
        c: &Container,
        plan: &Plan<F>,
        out: &mut [u8],
    ) -> Result<()> {
        read_pieces(c, plan, out, |work| {
            let sums = ring_pieces(c, &mut self, plan.idx, work, plan.stores);
            self.keep();
            sums
        })
    }
}

/// Reads `work` (pieces of records `idx`) with direct reads queued on `ring`, copying each
/// piece into its place as its read completes. Returns each piece's
/// `(record, offset, length, CRC32C from zero)`. The first failure stops new reads; the ones
/// in flight are reaped before it is returned, so no read writes into freed memory.
fn ring_pieces(
    c: &Container,
    ring: &mut Ring,
    idx: &[u64],
    work: Vec<Piece<'_>>,
    stores: Stores,
) -> Result<Vec<PieceSum>> {
    let maps = c.maps();
    let count = work.len();
    let ext: Vec<_> = work
        .iter()
        .map(|p| piece_extent(c, &maps, idx[p.k], p))
        .collect();
    // Every slot holds the longest read of the batch.
    let slot = ext.iter().map(|x| x.span).max().unwrap_or(DIRECT_ALIGN);
    let depth = (ARENA_BYTES / slot).clamp(1, MAX_DEPTH).min(count.max(1));
    let mut arena = take_arena(depth * slot);
    let pad = arena.as_ptr().align_offset(DIRECT_ALIGN);
    let base = arena[pad..].as_mut_ptr();
    let mut free: Vec<usize> = (0..depth).rev().collect();
    let mut work: Vec<Option<Piece<'_>>> = work.into_iter().map(Some).collect();
    let mut sums = Vec::with_capacity(count);
    let mut done = Vec::with_capacity(depth);
    let (mut next, mut in_flight, mut bytes_in_flight) = (0usize, 0usize, 0usize);
    let (mut pushed, mut done_at) = (0usize, 0usize);
    let mut error: Option<Error> = None;
    loop {
        while error.is_none() && next < count {
            let x = &ext[next];
            let Some(file) = c.shard_direct(x.shard) else {
                // A shard without direct reads: copy this piece from the map now.
                let Some(piece) = work[next].take() else {
                    break;
                };
                let i = idx[piece.k];
                match piece_through_map(c, &maps, i, x, piece.dst, stores) {
                    Ok(crc) => sums.push((piece.k, piece.off, x.want, crc)),
                    Err(e) => error = Some(e),
                }
                next += 1;
                continue;
            };
            if in_flight >= MIN_DEPTH && bytes_in_flight + x.span > BYTES_IN_FLIGHT {
                break;
            }
            let Some(s) = free.pop() else { break };
            // SAFETY: slot `s` lies inside the arena (`s < depth`, and the arena holds
            // `depth * slot` bytes past `base`).
            let buf = unsafe { base.add(s * slot) };
            let sqe = opcode::Read::new(types::Fd(file.as_raw_fd()), buf, x.span as u32)
                .offset(x.at)
                .build()
                .user_data(((next as u64) << 16) | s as u64);
            // SAFETY: the read writes `x.span <= slot` bytes into slot `s`, which nothing else
            // uses until its completion is reaped below; the arena and the descriptor outlive
            // the read, because this loop only ends once nothing is in flight (or, when the
            // ring fails, leaks the arena and closes the ring).
            if unsafe { ring.ring.submission().push(&sqe) }.is_err() {
                free.push(s);
                break;
            }
            next += 1;
            in_flight += 1;
            pushed += 1;
            bytes_in_flight += x.span;
        }
        if in_flight == 0 {
            break;
        }
        // Completions are handled one at a time, topping the queue up after each, so a long
        // copy does not leave the device idle; a wait happens only when none is at hand.
        let waited = if done_at == done.len() {
            ring.ring.submit_and_wait(1)
        } else if pushed > 0 {
            ring.ring.submit()
        } else {
            Ok(0)
        };
        pushed = 0;
        match waited {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
            Err(e) => {
                // Reads may be in flight that can no longer be reaped: the arena must outlive
                // them, and the ring is not reused.
                ring.broken = true;
                std::mem::forget(arena);
                return Err(Error::io(
                    "io_uring_enter",
                    c.shard_path(0),
                    io::Error::new(e.kind(), format!("cold batch read: {e}")),
                ));
            }
        }
        if done_at == done.len() {
            done.clear();
            done_at = 0;
            done.extend(ring.ring.completion().map(|c| (c.user_data(), c.result())));
            if done.is_empty() {
                continue;
            }
        }
        {
            let (data, res) = done[done_at];
            done_at += 1;
            in_flight -= 1;
            let (p, s) = ((data >> 16) as usize, (data & 0xffff) as usize);
            free.push(s);
            let x = &ext[p];
            bytes_in_flight -= x.span;
            let Some(piece) = work[p].take() else {
                continue;
            };
            // SAFETY: the read into slot `s` has completed; only this thread touches the slot
            // until it is handed out again.
            let buf = unsafe { std::slice::from_raw_parts_mut(base.add(s * slot), x.span) };
            let i = idx[piece.k];
            let need = x.head + x.want;
            let r = if res == -libc::EINVAL {
                piece_through_map(c, &maps, i, x, piece.dst, stores)
            } else if res < 0 && res != -libc::EINTR && res != -libc::EAGAIN {
                Err(piece_read_error(
                    c,
                    i,
                    x,
                    io::Error::from_raw_os_error(-res),
                ))
            } else {
                // A short or interrupted read finishes with blocking reads.
                let got = usize::try_from(res).unwrap_or(0).min(need);
                let rest = match c.shard_direct(x.shard) {
                    Some(file) if got < need => {
                        read_at_least(file, &mut buf[got..], x.at + got as u64, need - got)
                    }
                    _ => Ok(()),
                };
                match rest {
                    Ok(()) => Ok(copy_piece(c, piece.dst, &buf[x.head..need], stores)),
                    Err(e) => Err(piece_read_error(c, i, x, e)),
                }
            };
            match r {
                Ok(crc) => sums.push((piece.k, piece.off, x.want, crc)),
                Err(e) => {
                    error.get_or_insert(e);
                }
            }
        }
    }
    keep_arena(arena);
    match error {
        Some(e) => Err(e),
        None => Ok(sums),
    }
}
