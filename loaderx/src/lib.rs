//! # loaderx
//!
//! The data-loading half of the zrecord/loaderx pair:
//!
//! * [`sampler`]: stateless, counter-based index samplers ([`IndexSampler`], [`Mode`]) behind the
//!   [`Sampler`] trait any user type can implement. The batch at step `s` is a pure function of
//!   `(len, batch, mode, seed, s)`; `seek` is O(1).
//! * [`pool`]: [`PooledAllocator`], a bounded, size-classed pool implementing [`zrecord::Allocator`],
//!   with per-view recent size classes and hit/miss/live counters.
//! * [`loader`]: [`Loader`], which draws global index batches, splits them into per-shard slices,
//!   gathers every named stream ([`StreamView`]) at each shard position, and runs a transform, inline
//!   or on worker threads with a bounded output queue, in completion or step order.
//! * [`mixture`]: [`MixturePlan`], which draws each global batch from several sources by weight
//!   (exact apportionment, O(1) seek), behind [`Loader::mixture`].
//! * [`pack`]: [`Packer`], sequence packing of a Ragged token stream into `[rows, seq_len]`
//!   batches with segment ids and positions (concat or first-fit), its state resumable.
//! * [`state`]: [`LoaderState`], the small serde resume state of [`Loader::state_dict`] and
//!   [`Loader::load_state_dict`].
//!
//! * `cuda` (cargo feature `cuda`): pinned-host and device region sources for the pool, loaded
//!   from the NVIDIA driver at run time (see `docs/gpu.md`).
//!
//! See `docs/loaderx.md` for the algorithms and bounds.

#[cfg(feature = "cuda")]
pub mod cuda;
mod error;
pub mod loader;
pub mod mixture;
pub mod pack;
pub mod pool;
pub mod sampler;
pub mod state;

pub use error::{Error, Result};
pub use loader::{
    BLOCK_BUFFER_BYTES, Batch, Loader, LoaderOptions, MixtureSource, Shard, StreamView, Transform,
    block_buffer_blocks,
};
pub use mixture::{MixturePlan, MixtureSpec, WeightChange};
pub use pack::{PackMode, PackOptions, PackState, PackedBatch, PackedState, Packer, Pull};
pub use pool::{
    DEFAULT_POOL_SIZE, HostSource, LARGE_CLASS_BYTES, LARGE_FALLBACK, PooledAllocator,
    RegionSource, size_class,
};
pub use sampler::{
    BLOCK_TARGET_BYTES, DEFAULT_BLOCK, DEFAULT_WINDOW, IndexSampler, IndexSpec, MAX_DEFAULT_WINDOW,
    Mode, Sampler, WINDOW_TARGET_BYTES,
};
pub use state::{LoaderState, SamplerSpec, StreamPrint, ViewPrint};

#[cfg(test)]
mod pool_source_tests;
