//! A store's mapped block files ([`Mapped`]) and the snapshot of them a gather takes once
//! ([`Snapshot`]), lending out blocks ([`Held`]) with no lock and no reference count per record.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use super::key::Maps;

/// A block file mapped for hits, its header checked.
pub(super) struct Mapped {
    /// The header's length: the block's bytes follow it.
    pub(super) head: usize,
    /// Registers `map` with the `SIGBUS` guard; declared before `map`, so it is unregistered
    /// before the map is unmapped.
    pub(super) guard: crate::sigbus::Guard,
    pub(super) map: memmap2::Mmap,
    /// The file, for refreshing its modification time.
    pub(super) file: File,
    /// When this process last refreshed that time (seconds since the epoch).
    pub(super) touched: AtomicU64,
}

impl std::fmt::Debug for Mapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapped")
            .field("len", &self.map.len())
            .finish()
    }
}

/// A mapped block of a [`Snapshot`], its header checked but not its pages.
#[derive(Clone, Copy)]
pub(crate) struct Held<'s>(pub(super) &'s Mapped);

impl<'s> Held<'s> {
    /// The block's bytes, as mapped (its pages not checked).
    pub(crate) fn bytes(self) -> &'s [u8] {
        &self.0.map[self.0.head..]
    }

    /// Whether every read of the map so far read the file (false: the file shrank under the map
    /// and a read past its end got the `SIGBUS` guard's zeros).
    pub(crate) fn intact(self) -> bool {
        !self.0.guard.faulted()
    }
}

/// The blocks an open store held mapped when it was taken ([`super::BlockCache::held`]): a gather looks
/// its records' blocks up here with no lock and no reference count, and every map it holds stays
/// mapped while it lives.
pub(crate) struct Snapshot(pub(super) Arc<Maps<Arc<Mapped>>>);

impl Snapshot {
    /// Block `b` of shard `shard`, if this snapshot holds it mapped.
    pub(crate) fn get(&self, uuid: &[u8; 16], shard: u32, b: u64) -> Option<Held<'_>> {
        self.0.get(&(*uuid, shard, b)).map(|m| Held(m))
    }
}
