//! The getters a store and its views share, written once as two macros expanded in both
//! ([`super::store`], [`super::view`]): [`container_getters`] (every layout) and
//! [`layout_getters`] (the layout's own: the item shape of a Dense store, the rank and
//! per-record shapes of a Ragged one). Each reads what the store opened, `self.c` (`super::opened`).

/// The getters of a store or view of any layout, on what it opened, `self.c`.
macro_rules! container_getters {
    () => {
        /// Number of records.
        pub fn len(&self) -> u64 {
            self.c.records()
        }

        /// True when the store holds no records.
        pub fn is_empty(&self) -> bool {
            self.c.records() == 0
        }

        /// Element type.
        pub fn dtype(&self) -> crate::dtype::DType {
            self.c.dtype()
        }

        /// Codec the records were written with.
        pub fn codec(&self) -> crate::format::Codec {
            self.c.codec()
        }

        /// The dictionary stored in a `zstd_dict` container.
        pub fn dictionary(&self) -> Option<&[u8]> {
            self.c.dictionary()
        }

        /// The version of a dataset of parts this reads (`None` for a single container).
        pub fn version(&self) -> Option<u64> {
            self.c.version()
        }

        /// Allocated bytes on disk (all files; a dataset: the bytes its version lists for this
        /// column's parts).
        pub fn disk_bytes(&self) -> u64 {
            self.c.disk_bytes()
        }

        /// Reads in blocks of `records` consecutive records from now on (block `b`: records
        /// `b * records .. (b + 1) * records`), keeping at most `blocks` of them decoded in
        /// memory, for this store and every view and clone of it: a gather copies its records
        /// from the blocks it touches and fetches the blocks it lacks together, each once (on
        /// object storage one range GET per block and shard run). For a block shuffle
        /// (`loaderx`'s `Mode::Block`): `records` its block, `blocks` at least its window plus
        /// the blocks one batch spans. Memory: `blocks` blocks decoded, plus those the gathers in
        /// flight fetched beyond them. Asking again with the same shape is a no-op; another shape
        /// is an error (open the store again).
        pub fn buffer_blocks(&self, records: u64, blocks: usize) -> crate::error::Result<()> {
            self.c.buffer_blocks(records, blocks)
        }

        /// What the block buffer holds and has fetched (`None` without one).
        pub fn block_buffer_stats(&self) -> Option<crate::BlockBufferStats> {
            self.c.window().map(|w| w.stats())
        }

        /// Whether the store was closed ([`crate::Store::close`]).
        pub fn is_closed(&self) -> bool {
            self.c.is_closed()
        }
    };
}
pub(super) use container_getters;

/// The getters of a store or view of layout `Dense` or `Ragged`, on what it opened, `self.c`.
macro_rules! layout_getters {
    (Dense) => {
        /// Shape of one record.
        pub fn item_shape(&self) -> &[u64] {
            self.c.item_shape()
        }

        /// Bytes per record.
        pub fn record_bytes(&self) -> u64 {
            self.c.record_bytes()
        }
    };
    (Ragged) => {
        /// Rank of every record.
        pub fn ndim(&self) -> u32 {
            self.c.ndim()
        }

        /// Shape of record `i` (from the index, no payload read).
        pub fn shape_of(&self, i: u64) -> crate::error::Result<Vec<u64>> {
            self.c.shape_of(i)
        }
    };
}
pub(super) use layout_getters;
