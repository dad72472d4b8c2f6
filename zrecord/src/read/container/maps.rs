//! A container's mapped bytes for one run of records ([`Maps`]): the index and every shard,
//! fetched once so that the per-record path makes no virtual calls, up to four shards held in
//! place ([`ShardBytes`]).

/// A store's mapped bytes for one run of records, fetched once so that the per-record path makes
/// no virtual calls.
pub(in crate::read) struct Maps<'a> {
    /// The index file.
    pub(in crate::read) index: &'a [u8],
    /// Every shard file, in shard order.
    pub(in crate::read) shards: ShardBytes<'a>,
}

/// Every shard file's bytes, in shard order: up to [`INLINE_SHARDS`] held in place (no allocation
/// for a container of few shards, as each part of a random batch over a dataset's parts fetches
/// its maps), more in a `Vec`. Reads as a slice.
pub(in crate::read) enum ShardBytes<'a> {
    Inline([&'a [u8]; INLINE_SHARDS], usize),
    Heap(Vec<&'a [u8]>),
}

/// Shards a [`ShardBytes`] holds without allocating.
pub(super) const INLINE_SHARDS: usize = 4;

impl<'a> std::ops::Deref for ShardBytes<'a> {
    type Target = [&'a [u8]];

    #[inline]
    fn deref(&self) -> &[&'a [u8]] {
        match self {
            ShardBytes::Inline(a, n) => &a[..*n],
            ShardBytes::Heap(v) => v,
        }
    }
}
