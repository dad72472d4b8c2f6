//! Reading. The parts, in data-path order:
//!
//! * [`container`]: the validated container (opened and checked before the first read) and the
//!   narrow API the rest asks where each record is and what the store holds;
//! * [`store`] and [`view`]: the public store and view types, generic over the record
//!   [`layout`] (Dense or Ragged, which says how a gather sizes its output and fills it); a
//!   view's gather sizes its output, takes it from the allocator and hands it to the engines;
//! * [`engine`]: the read engines (warm copy from the map, blocking direct reads, io_uring) and
//!   the choice of one per gather, made with the cold-read policy of [`cold`];
//! * what the engines share, never importing one another: [`plan`] (the gather an engine is
//!   handed, the engine interface, the output split), [`piece`] (pieces of a direct read),
//!   [`decode`] (one record's check and decode), [`ranges`] (a gather as coalesced ranges of its
//!   shards, for the engines that fetch instead of mapping), [`readers`] (the blocking readers of
//!   one gather), [`fan_out`] (whether a gather may spread over
//!   threads) and [`hint`] (prefetch and page-cache hints);
//! * [`batch`]: the batches a gather returns; [`verify`]: the full check behind `verify()`.
//!
//! This module only declares its children and re-exports their public items; the children never
//! import it (the module graph stays acyclic).

mod batch;
mod cold;
mod container;
mod decode;
mod engine;
mod fan_out;
mod getters;
mod hint;
mod layout;
mod opened;
mod parts;
mod piece;
mod plan;
mod ranges;
mod readers;
mod store;
mod verify;
mod view;
mod window;

pub use batch::{Batch, DenseBatch, OUTPUT_ALIGN, RaggedBatch};
pub use container::{
    CacheStats, ColdReads, INDEX_MEMORY_BYTES, OpenOptions, RecordExtent, RemoteOptions,
    RequestStats, container_files, set_index_memory,
};
#[cfg(feature = "mutations")]
pub use engine::with_blocking_direct_reads;
pub use fan_out::{gather_fan_outs, sequential_gathers};
pub use layout::{Dense, Layout, Ragged};
#[cfg(feature = "internals")]
pub use plan::split_output;
#[cfg(feature = "internals")]
pub(crate) use plan::stores_for;
pub use store::{DenseStore, RaggedStore, Store};
pub use view::{DenseView, RaggedView, View, ViewGather};
pub use window::BlockBufferStats;
